"""Segments of an X12 interchange read from a text stream, and resuming in the middle of one.

`segments()` runs pyx12's streaming reader (`X12ContextReader`) over a stream and yields each
segment with its own errors (`errors.SegmentErrors`, drained segment by segment). What it
adds to pyx12, and why:

- Whitespace between segments ("~ " then a line break) is read as EDI translators write it
  (`_Spacing`); a segment longer than MAX_SEGMENT_CHARS (its terminator missing) rejects
  the file first.
- Envelope segments' elements (ISA, GS, ST, SE, GE, IEA) are validated, as pyx12's own
  validation (`x12n_document`) does and its streaming reader does not.
- `LineIndex`: the physical line and byte offset each segment starts on (memory is pyx12's
  read-ahead, not the file); `Header`: the envelope and header segments the reader is in.
- Resume points (`LineIndex.resume_point`, at an INS): the byte offset, line and segment
  number, the header segments to replay and pyx12's counters. Given one, `segments()`
  starts at its offset with the header replayed in front (pyx12 is then in the same loop of
  the same transaction set) and pyx12's counters restored: the SE, GE and IEA counts are
  checked as if it had read from the top. pyx12's counters are read and set through
  `_pyx12` (`counters`, `restore_counters`), here and nowhere else.

Imports `_pyx12`, `errors`, and the app's `records` (SourceFileError) and `text_stream`.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import pyx12.errors
import pyx12.map_if
import pyx12.params
import pyx12.x12context

from shared.imports.config import DEFAULT_MAX_LOOP_SEGMENTS
from shared.imports.records import SourceFileError
from shared.imports.text_stream import byte_length, has_undecodable
from shared.imports.x12 import _pyx12
from shared.imports.x12.errors import SegmentErrors, drain, in_member_loop


class TextSource(Protocol):
    """What the reader needs from a stream: `read(n)` (a `ChunkedText`, a `StringIO`)."""

    def read(self, size: int = -1, /) -> str: ...


class SegmentListener(Protocol):
    """Told about every segment read (not the replayed ones): `acks.AckWriter`."""

    def segment(self, number: int, seg_id: str, data: Any, *, in_member: bool,
                has_errors: bool, nodes: list[Any],
                coded: list[tuple[str, str]]) -> None: ...  # fmt: skip

    def end_of_file(self, nodes: list[Any], coded: list[tuple[str, str]]) -> None: ...


#: The envelope segments (openers and trailers).
ENVELOPE = ("SE", "GE", "IEA", "ST", "GS", "ISA")


@dataclass
class Segment:
    seg_id: str
    number: int
    text: str
    path: str
    data: Any
    errors: list[str]
    replayed: bool = False  # a header segment put back in front of a resumed stream


#: What pyx12 raises on malformed input: its own errors, and (found by fuzzing, e.g. a segment
#: cut short) plain IndexError/ValueError/KeyError/TypeError from inside it. Storage errors
#: from the stream are none of these, so they still propagate and the run is retried.
PARSER_FAILURES = (
    pyx12.errors.X12Error,
    pyx12.errors.EngineError,
    IndexError,
    KeyError,
    TypeError,
    ValueError,
    AttributeError,
)


def segments(
    stream: TextSource,
    envelope_errors: list[str],
    lines: LineIndex | None = None,
    resume: dict[str, Any] | None = None,
    *,
    envelope_only: bool = False,
    ack: SegmentListener | None = None,
    errh: SegmentErrors | None = None,
) -> Iterator[Segment]:
    """pyx12's segments with their own errors; envelope errors are appended as they appear.

    `envelope_only` (the envelope pass): segments inside member loops come without their
    element errors and text (that pass uses neither; see `SegmentErrors`). `errh`: the error
    list to use (the members pass sets its `skip_member_elements` in a family over its cap).

    `ack`: told about every segment read (not the replayed ones), to acknowledge the file.

    `resume`: a resume point (`LineIndex.resume_point`); `stream` then starts at its byte
    offset, its header segments replayed in front and pyx12's counters restored (see the
    module doc).
    """
    if resume is None:
        first = stream.read(3)
        if not first:
            raise SourceFileError("empty file")
        if first != "ISA":
            raise SourceFileError("not an X12 interchange: the file does not start with ISA")
        source = _Prefixed(first, stream, lines)
        replay = 0
    else:
        prefix = "".join(resume["prefix"])
        source = _Prefixed(prefix, stream, lines, feed_prefix=False)
        replay = len(resume["prefix"])
    if errh is None:
        errh = SegmentErrors(skip_member_elements=envelope_only)
    params = pyx12.params.params()
    try:
        reader = pyx12.x12context.X12ContextReader(params, errh, source)
    except SourceFileError:
        raise
    except pyx12.errors.X12Error as error:
        # pyx12's message quotes only the ISA header (sender/receiver ids, no member data)
        raise SourceFileError(f"not a valid X12 interchange header: {error}") from None
    except PARSER_FAILURES as error:
        raise SourceFileError(
            f"not a valid X12 interchange header: {type(error).__name__}"
        ) from None
    if lines is not None:
        lines.counters = lambda: _pyx12.counters(reader.src)
    try:
        for node in reader.iter_segments():
            seg = node.seg_data
            map_node = node.x12_map_node
            seg_id = seg.get_seg_id() if seg is not None else ""
            if seg_id in ENVELOPE and isinstance(map_node, pyx12.map_if.segment_if):
                _pyx12.validate_segment_elements(map_node, seg, errh)
            envelope, errors, coded = drain(errh)
            envelope_errors.extend(envelope)
            member = in_member_loop(map_node)
            skip = envelope_only and member
            text = seg.format() if seg is not None and not skip else ""
            if has_undecodable(text):
                errors.append("segment is not valid UTF-8")
            nodes, element_codes = errh.take()
            if ack is not None and replay == 0:
                ack.segment(int(node.cur_line_number or 0), seg_id, seg, in_member=member,
                            has_errors=bool(errors), nodes=nodes,
                            coded=coded + element_codes)  # fmt: skip
            yield Segment(
                seg_id=seg_id,
                number=int(node.cur_line_number or 0),
                text=text,
                path=map_node.get_path() if map_node is not None else "",
                data=seg,
                errors=errors,
                replayed=replay > 0,
            )
            if replay > 0:
                replay -= 1
                if replay == 0 and resume is not None:
                    _pyx12.restore_counters(reader.src, resume["x12"])
        reader.src.cleanup()  # missing SE / GE / IEA: a truncated file
        errh.handle_errors(reader.src.pop_errors())
        errh.flush()
        envelope, errors, coded = drain(errh)
        envelope_errors.extend(envelope + errors)
        nodes, element_codes = errh.take()
        if ack is not None:
            ack.end_of_file(nodes, coded + element_codes)
        leftover = _pyx12.leftover(reader.src).strip()
        if leftover:
            envelope_errors.append(f"{len(leftover)} character(s) after the last segment")
    except SourceFileError:
        raise
    except PARSER_FAILURES as error:
        raise SourceFileError(f"pyx12 could not parse the file: {type(error).__name__}") from None


class _Prefixed:
    """A stream with its first characters (already read to sniff the format) put back;
    what pyx12 reads is also shown to `lines`, which notes where each segment starts."""

    def __init__(
        self,
        prefix: str,
        stream: TextSource,
        lines: LineIndex | None = None,
        *,
        feed_prefix: bool = True,
    ) -> None:
        """`feed_prefix` False: the prefix is not the file's (a resumed stream's replayed
        header), so `lines` sees only what comes from `stream`."""
        self._prefix = prefix
        self._stream = stream
        self._lines = lines
        self._feed_prefix = feed_prefix
        self._spacing = _Spacing()
        self.closed = False

    def read(self, size: int = -1) -> str:
        """What pyx12 reads, whitespace between segments dropped (`_Spacing`); never ""
        before the end of the stream (pyx12 takes an empty answer for the end)."""
        while True:
            head, text = self._read(size)
            if self._lines is not None:
                if self._feed_prefix and head:
                    self._lines.feed(head)
                if text:
                    self._lines.feed(text)
            raw = head + text
            spaced = self._spacing(raw)
            if spaced or not raw or size == 0:
                return spaced

    def _read(self, size: int) -> tuple[str, str]:
        if not self._prefix:
            return "", self._stream.read(size)
        if size < 0:
            head, self._prefix = self._prefix, ""
            return head, self._stream.read()
        head, self._prefix = self._prefix[:size], self._prefix[size:]
        return head, (self._stream.read(size - len(head)) if size > len(head) else "")


_NOT_SPACE = re.compile(r"\S")
ISA_LENGTH = 106  # the ISA segment is fixed length; its last character ends every segment
#: Whitespace EDI translators put between segments (after a terminator): "~ " then a line
#: break, "~\r\n", a tab.
_BETWEEN = " \t\r\n"
#: A segment longer than this is no 834 segment (its longest elements hold 80 characters,
#: its longest segments a few hundred): its terminator is missing. pyx12 takes a segment it
#: has not seen the end of within 8 KiB for the end of the file (and reports the file
#: truncated); the file is rejected first, with this reason.
MAX_SEGMENT_CHARS = 4096


class _Spacing:
    """Drops whitespace between segments from the text pyx12 reads: pyx12 strips only line
    breaks after a terminator, and reports a segment starting with a space as an error
    ("segment contains a leading space") that would reject the whole file. The ISA (the
    first 106 characters, whose elements are padded with spaces) passes unchanged; its
    last character is the segment terminator."""

    def __init__(self) -> None:
        self._seen = 0
        self._terminator: str | None = None
        self._pattern: re.Pattern[str] | None = None
        self._after = False  # the last character passed on was a terminator

    def __call__(self, text: str) -> str:
        if self._terminator is None:
            need = ISA_LENGTH - self._seen
            if len(text) < need:
                self._seen += len(text)
                return text
            isa, rest = text[:need], text[need:]
            self._seen = ISA_LENGTH
            self._terminator = isa[-1]
            self._pattern = re.compile(re.escape(self._terminator) + f"[{_BETWEEN}]+")
            self._after = True
            return isa + self._strip(rest)
        return self._strip(text)

    def _strip(self, text: str) -> str:
        if not text:
            return text
        assert self._pattern is not None and self._terminator is not None
        if self._after:
            text = text.lstrip(_BETWEEN)
            if not text:
                return ""
        text = self._pattern.sub(lambda _: self._terminator or "", text)
        self._after = text.endswith(self._terminator)
        return text


class LineIndex:
    """The physical line each segment starts on, for the segments pyx12 has read but not yet
    handed out (so memory is pyx12's read-ahead, not the file). Segments are counted as pyx12
    counts them: non-empty, terminated by the character after ISA16."""

    def __init__(self, resume: dict[str, Any] | None = None) -> None:
        self._terminator: str | None = None
        self._head = ""
        self._line = 1
        self._count = 0
        self._byte = 0  # file offset of the text being fed
        self._in_segment = False
        self._segment_chars = 0  # of the segment being read
        self._starts: deque[tuple[int, int, int]] = deque()
        #: pyx12's counters now (set by `segments`; None: unknown), for a resume point.
        self.counters: Callable[[], dict[str, Any] | None] | None = None
        if resume is not None:
            self._terminator = resume["prefix"][0][ISA_LENGTH - 1]
            self._line, self._count = int(resume["line"]), int(resume["segment"]) - 1
            self._byte = int(resume["offset"])

    def feed(self, text: str) -> None:
        if self._terminator is None:
            self._head += text
            if len(self._head) < ISA_LENGTH:
                return
            self._terminator, text, self._head = self._head[ISA_LENGTH - 1], self._head, ""
        start = self._byte
        self._byte += byte_length(text)
        ascii_text = text.isascii()
        pos, size = 0, len(text)
        while pos < size:
            if not self._in_segment:
                found = _NOT_SPACE.search(text, pos)
                if found is None:
                    self._line += text.count("\n", pos)
                    return
                self._line += text.count("\n", pos, found.start())
                pos = found.start()
                if text[pos] == self._terminator:
                    pos += 1  # an empty segment
                    continue
                self._count += 1
                self._in_segment = True
                self._segment_chars = 0
                at = start + (pos if ascii_text else byte_length(text[:pos]))
                self._starts.append((self._count, self._line, at))
            end = text.find(self._terminator, pos)
            self._segment_chars += (size if end < 0 else end) - pos
            if self._segment_chars > MAX_SEGMENT_CHARS:
                raise SourceFileError(
                    f"segment {self._count} (line {self._line}) is longer than "
                    f"{MAX_SEGMENT_CHARS} characters: is its terminator missing?"
                )
            if end < 0:
                self._line += text.count("\n", pos)
                return
            self._line += text.count("\n", pos, end)
            pos, self._in_segment = end + 1, False

    def line_of(self, segment: int) -> int:
        """The line segment number `segment` starts on (0 if unknown); forgets earlier ones."""
        found = self._start(segment)
        return found[1] if found else 0

    def _start(self, segment: int) -> tuple[int, int, int] | None:
        while self._starts and self._starts[0][0] < segment:
            self._starts.popleft()
        if self._starts and self._starts[0][0] == segment:
            return self._starts[0]
        return None

    def resume_point(self, segment: int, prefix: list[str]) -> dict[str, Any] | None:
        """Where to resume just before INS segment `segment`, which pyx12 has just read
        (None if unknown): its byte offset, line and number, the header segments to replay
        (`prefix`) and pyx12's counters."""
        found = self._start(segment)
        counters = self.counters() if self.counters is not None and found else None
        if found is None or counters is None:
            return None
        return {"offset": found[2], "line": found[1], "segment": segment,
                "prefix": prefix, "x12": counters}  # fmt: skip

    def close(self) -> None:
        self.closed = True


class Header:
    """The envelope and header segments the reader is inside (ISA, GS, ST and the set's
    header up to its first INS): what a resumed stream replays in front of itself. A header
    longer than `limit` segments is not kept (`too_long`; the envelope pass rejects it)."""

    def __init__(self, limit: int = DEFAULT_MAX_LOOP_SEGMENTS) -> None:
        self.isa: str | None = None
        self.gs: str | None = None
        self.st: list[str] | None = None
        self._open = False
        self._st_number = 0
        self.limit = limit
        self.too_long: int | None = None  # the ST segment's number of a header over the limit

    def see(self, seg: Segment) -> None:
        seg_id = seg.seg_id
        if seg_id == "ISA":
            self.isa, self.gs, self.st = seg.text, None, None
        elif seg_id == "GS":
            self.gs, self.st = seg.text, None
        elif seg_id == "ST":
            self.st, self._open, self._st_number = [seg.text], True, seg.number
        elif seg_id == "SE":
            self.st = None
        elif seg_id == "GE":
            self.gs = None
        elif seg_id == "IEA":
            self.isa = None
        elif seg_id == "INS":
            self._open = False
        elif self._open and self.st is not None:
            if len(self.st) >= self.limit:
                self.too_long, self._open = self._st_number, False
                return
            self.st.append(seg.text)

    def prefix(self) -> list[str] | None:
        """What to replay before a resumed INS (None: not inside a transaction set)."""
        if self.isa is None or self.gs is None or self.st is None:
            return None
        return [self.isa, self.gs, *self.st]
