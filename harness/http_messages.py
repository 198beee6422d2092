"""HTTP/1.1 messages read whole off asyncio streams, kept byte for byte as they were sent.

The fault proxy (`fault_proxy.py`) decides the fate of each request on a kept-alive
connection, so it must know where one request (and its answer) ends: the head up to the
empty line, then a body framed by `Content-Length` or `Transfer-Encoding: chunked` (the
chunk framing is kept, so the message is forwarded exactly as received), none for a HEAD
request's answer or a 1xx, 204 or 304, and to the end of the connection for an answer with
neither. Malformed framing raises `MalformedMessage`; a peer that closes between messages
reads as None.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

#: The longest head (start line and headers) accepted, as the stream reader's limit.
MAX_HEAD = 1 << 20


class MalformedMessage(ValueError):
    """A message whose start line, headers or framing cannot be read."""


@dataclass(frozen=True)
class Message:
    """One request or response: its `head` and `body` exactly as received, parsed enough to
    route it (`start` line, `headers` in order)."""

    head: bytes
    body: bytes
    start: str
    headers: tuple[tuple[str, str], ...]

    @property
    def raw(self) -> bytes:
        return self.head + self.body

    def header(self, name: str) -> str | None:
        """The first header called `name` (any case), or None."""
        wanted = name.lower()
        return next((v for n, v in self.headers if n.lower() == wanted), None)

    @property
    def method(self) -> str:
        """A request's method ("GET", "PUT"...)."""
        return self.start.split(" ", 1)[0].upper()

    @property
    def target(self) -> str:
        """A request's target: path and query, as sent."""
        parts = self.start.split(" ")
        return parts[1] if len(parts) > 1 else ""

    @property
    def status(self) -> int:
        """A response's status code."""
        try:
            return int(self.start.split(" ", 2)[1])
        except (IndexError, ValueError):
            raise MalformedMessage(f"not a status line: {self.start[:80]!r}") from None

    @property
    def keeps_alive(self) -> bool:
        """Whether the connection stays open after this message (HTTP/1.1 unless `close`)."""
        connection = (self.header("Connection") or "").lower()
        if "close" in connection:
            return False
        response = self.start.startswith("HTTP/")
        version = self.start.split(" ", 1)[0] if response else self.start.rsplit(" ", 1)[-1]
        return version == "HTTP/1.1" or "keep-alive" in connection


async def read_request(reader: asyncio.StreamReader) -> Message | None:
    """The next request on the connection, or None when the client closed it between two."""
    head = await _read_head(reader)
    if head is None:
        return None
    raw, start, headers = head
    return Message(raw, await _read_body(reader, headers, to_close=False), start, headers)


async def read_response(reader: asyncio.StreamReader, method: str) -> Message | None:
    """The answer to a `method` request, or None when the server closed the connection
    before answering."""
    head = await _read_head(reader)
    if head is None:
        return None
    raw, start, headers = head
    message = Message(raw, b"", start, headers)
    status = message.status
    if method.upper() == "HEAD" or 100 <= status < 200 or status in (204, 304):
        return message
    return Message(raw, await _read_body(reader, headers, to_close=True), start, headers)


async def _read_head(
    reader: asyncio.StreamReader,
) -> tuple[bytes, str, tuple[tuple[str, str], ...]] | None:
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as error:
        if error.partial.strip():
            raise MalformedMessage("the connection closed in the middle of a head") from None
        return None
    except asyncio.LimitOverrunError:
        raise MalformedMessage(f"a head longer than {MAX_HEAD} bytes") from None
    lines = raw[:-4].decode("latin-1").split("\r\n")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise MalformedMessage(f"not a header line: {line[:80]!r}")
        headers.append((name.strip(), value.strip()))
    return raw, lines[0], tuple(headers)


def _find(headers: tuple[tuple[str, str], ...], name: str) -> str | None:
    return next((v for n, v in headers if n.lower() == name), None)


async def _read_body(
    reader: asyncio.StreamReader, headers: tuple[tuple[str, str], ...], *, to_close: bool
) -> bytes:
    """The body as framed by the headers; a response with no framing runs to the close."""
    encoding = _find(headers, "transfer-encoding")
    try:
        if encoding is not None and "chunked" in encoding.lower():
            return await _read_chunked(reader)
        length = _find(headers, "content-length")
        if length is not None:
            if not length.isdigit():
                raise MalformedMessage(f"Content-Length {length[:40]!r}")
            return await reader.readexactly(int(length))
    except asyncio.IncompleteReadError:
        raise MalformedMessage("the connection closed in the middle of a body") from None
    return await reader.read() if to_close else b""


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        line = await reader.readuntil(b"\r\n")
        parts.append(line)
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise MalformedMessage(f"not a chunk size: {line[:40]!r}") from None
        if size == 0:
            while True:  # trailers, up to the empty line
                trailer = await reader.readuntil(b"\r\n")
                parts.append(trailer)
                if trailer == b"\r\n":
                    return b"".join(parts)
        parts.append(await reader.readexactly(size + 2))
