"""Reading HTTP/1.1 messages whole, as the fault proxy must to answer request by request."""

from __future__ import annotations

import asyncio

import pytest

from harness.http_messages import MalformedMessage, Message, read_request, read_response


def _reader(data: bytes) -> asyncio.StreamReader:
    """A reader holding `data`, then the end of the connection (made inside a running loop)."""
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


CHUNKED = (
    b"PUT /acct/c/b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"
)
SIMPLE = b"DELETE /acct/q/messages/1?popreceipt=p HTTP/1.1\r\nContent-Length: 2\r\n\r\nok"


def test_requests_on_one_connection_are_read_one_by_one_exactly_as_sent() -> None:
    async def read_all() -> list[Message | None]:
        reader = _reader(CHUNKED + SIMPLE)
        return [await read_request(reader), await read_request(reader), await read_request(reader)]

    first, second, end = asyncio.run(read_all())
    assert first is not None and second is not None
    assert first.raw == CHUNKED and first.method == "PUT" and first.keeps_alive
    assert second.raw == SIMPLE and second.method == "DELETE"
    assert second.target == "/acct/q/messages/1?popreceipt=p" and second.body == b"ok"
    assert end is None  # the client closed between two requests


def test_an_answer_to_head_or_a_204_has_no_body_and_one_without_length_runs_to_the_close() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n"
    no_content = b"HTTP/1.1 204 No Content\r\n\r\n"
    to_close = b"HTTP/1.0 200 OK\r\n\r\nall of it"

    async def read_all() -> tuple[Message | None, ...]:
        return (
            await read_response(_reader(head + b"next"), "HEAD"),
            await read_response(_reader(no_content + b"next"), "DELETE"),
            await read_response(_reader(to_close), "GET"),
        )

    head_answer, empty, whole = asyncio.run(read_all())
    assert head_answer is not None and empty is not None and whole is not None
    assert head_answer.raw == head and head_answer.status == 200
    assert empty.raw == no_content and empty.status == 204
    assert whole.body == b"all of it" and not whole.keeps_alive


@pytest.mark.parametrize(
    "broken",
    [b"GET / HTTP/1.1\r\nno colon here\r\n\r\n",
     b"PUT / HTTP/1.1\r\nContent-Length: 10\r\n\r\nshort",
     b"PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
     b"PUT / HTTP/1.1\r\nContent-Le"],
)  # fmt: skip
def test_a_malformed_request_is_refused_by_name(broken: bytes) -> None:
    async def read() -> Message | None:
        return await read_request(_reader(broken))

    with pytest.raises(MalformedMessage):
        asyncio.run(read())
