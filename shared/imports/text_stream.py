"""Text from a stream of byte chunks, decoded incrementally: never the whole file in memory.

Bytes that are not UTF-8 are kept as lone surrogates ("surrogateescape") instead of failing
the whole file: the reader can then reject just the record that holds them, and the rejected
file can still carry the original bytes (so `byte_length` of what was read is exactly the
bytes it came from: a reader resumes a file at such an offset). A UTF-8 byte order mark is
dropped (at offset 0 only).
"""

from __future__ import annotations

import codecs
import io
import re
from collections.abc import Iterable, Iterator

_UNDECODABLE = re.compile("[\udc80-\udcff]")  # where surrogateescape put bytes it could not decode
#: A "line" longer than this is handed out in pieces, so a file without line breaks cannot
#: make the reader hold all of it (the CSV reader then rejects the oversized field).
MAX_LINE = 1024 * 1024


def has_undecodable(text: str) -> bool:
    """True when `text` holds bytes that were not valid UTF-8."""
    return _UNDECODABLE.search(text) is not None


def first_undecodable(text: str) -> int:
    """The 1-based column of the first byte that was not valid UTF-8 (0 if none)."""
    found = _UNDECODABLE.search(text)
    return found.start() + 1 if found else 0


def original_bytes(text: str) -> bytes:
    """The bytes `text` was decoded from (undecodable bytes included)."""
    return text.encode("utf-8", "surrogateescape")


def byte_length(text: str) -> int:
    """How many bytes of the file `text` was decoded from (for resume offsets)."""
    return len(text) if text.isascii() else len(original_bytes(text))


class ChunkedText(io.TextIOBase):
    """A read-only text stream over byte chunks (e.g. `download_blob().chunks()`).

    Supports `read(n)` (for pyx12) and line iteration keeping line endings (for `csv`, which
    needs newline="" semantics to handle quoted line breaks).
    """

    def __init__(self, chunks: Iterable[bytes], *, start: int = 0) -> None:
        """`start`: the byte offset the chunks begin at in the file; a byte order mark is
        dropped only at offset 0 (`bom` tells whether there was one)."""
        super().__init__()
        self._chunks: Iterator[bytes] = iter(chunks)
        encoding = "utf-8-sig" if start == 0 else "utf-8"
        self._decoder = codecs.getincrementaldecoder(encoding)(errors="surrogateescape")
        self.start = start
        self.bom = 0  # bytes of the byte order mark dropped (0 or 3)
        self._first = start == 0
        self._buffer = ""
        self._pos = 0  # consumed part of the buffer: slicing per line would copy it each time
        self._eof = False
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def _fill(self) -> bool:
        """Decode one more chunk onto the unread text; False at the end of the stream."""
        if self._eof:
            return False
        for chunk in self._chunks:
            if self._first and chunk:
                self._first = False
                self.bom = 3 if chunk.startswith(codecs.BOM_UTF8) else 0
            self.bytes_read += len(chunk)
            text = self._decoder.decode(chunk)
            if text:
                self._buffer = self._buffer[self._pos :] + text
                self._pos = 0
                return True
        tail = self._decoder.decode(b"", final=True)
        self._eof = True
        if tail:
            self._buffer = self._buffer[self._pos :] + tail
            self._pos = 0
            return True
        return False

    def _take(self, end: int) -> str:
        text = self._buffer[self._pos : end]
        self._pos = end
        return text

    def read(self, size: int | None = -1) -> str:
        if size is None or size < 0:
            while self._fill():
                pass
            return self._take(len(self._buffer))
        while len(self._buffer) - self._pos < size and self._fill():
            pass
        return self._take(min(len(self._buffer), self._pos + size))

    # typeshed's TextIOBase inherits IOBase's bytes signatures for these three; str is right.
    def readline(self, size: int | None = -1) -> str:  # type: ignore[override]
        start = self._pos
        while True:
            end = self._buffer.find("\n", start)
            if end >= 0:
                return self._take(end + 1)
            start = len(self._buffer) - self._pos  # offsets shift when _fill compacts
            if start >= MAX_LINE:
                return self._take(self._pos + MAX_LINE)
            if not self._fill():
                return self._take(len(self._buffer))
            start = self._pos + start

    def __iter__(self) -> Iterator[str]:  # type: ignore[override]
        return self

    def __next__(self) -> str:  # type: ignore[override]
        line = self.readline()
        if not line:
            raise StopIteration
        return line
