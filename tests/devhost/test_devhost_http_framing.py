"""devhost frames request bodies as Azure's front end does (issue 42 §6), over a raw socket.

A `Content-Length` that is not one field of digits is 400 and the connection closes (RFC 9112
section 6.3); a POST or PUT with neither a length nor chunked encoding is 411, as
*.azurewebsites.net answers it (MicrosoftDocs/azure-docs#58216). Before, `Content-Length: -1`
read the connection to its end, past any body limit, and `abc` left the body to be parsed as
the next request. The server here has no functions: a request framed correctly gets 404.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator

import pytest

from devhost.http_server import HttpHost
from devhost.stats import WorkerStats
from harness.services import free_port

LIMIT = 1024
STATUS_LINE = re.compile(rb"HTTP/1\.1 (\d{3}) ")


@pytest.fixture
def port(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    monkeypatch.setenv("FUNCTIONS_REQUEST_BODY_SIZE_LIMIT", str(LIMIT))
    host = HttpHost([], free_port(), "", WorkerStats())
    host.start()
    try:
        yield host.port
    finally:
        host.stop()


def exchange(port: int, raw: bytes) -> tuple[list[int], bool]:
    """Send `raw` without closing our side; the statuses answered until the server closed the
    connection (True) or stopped answering for 20 s with it open (False)."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as connection:
        connection.sendall(raw)
        received = b""
        closed = False
        try:
            while chunk := connection.recv(65536):
                received += chunk
            closed = True
        except TimeoutError:
            pass
    return [int(status) for status in STATUS_LINE.findall(received)], closed


def request(method: str, *headers: str, body: bytes = b"") -> bytes:
    lines = [f"{method} /api/anything HTTP/1.1", "Host: 127.0.0.1", *headers, "", ""]
    return "\r\n".join(lines).encode() + body


FOLLOWING = request("GET", "Connection: close")  # a second request on the same connection


@pytest.mark.parametrize("value", ["-1", "abc", "1e3", "+5", "0x10", "", "5, 5"])
def test_a_malformed_content_length_is_400_and_the_connection_closes(port: int, value: str) -> None:
    raw = request("POST", f"Content-Length: {value}", body=b"x" * 5) + FOLLOWING
    assert exchange(port, raw) == ([400], True)


def test_a_negative_length_does_not_read_to_the_end_of_the_connection(port: int) -> None:
    """More than the limit follows, and the client keeps the connection open: the answer comes
    from the headers alone."""
    raw = request("POST", "Content-Length: -1", body=b"x" * (4 * LIMIT))
    assert exchange(port, raw) == ([400], True)


def test_two_content_length_fields_are_400(port: int) -> None:
    raw = request("POST", "Content-Length: 5", "Content-Length: 5", body=b"x" * 5)
    assert exchange(port, raw) == ([400], True)


@pytest.mark.parametrize("method", ["POST", "PUT"])
def test_a_post_or_put_without_a_length_is_411(port: int, method: str) -> None:
    assert exchange(port, request(method) + FOLLOWING) == ([411], True)


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_other_methods_without_a_length_have_no_body(port: int, method: str) -> None:
    assert exchange(port, request(method) + FOLLOWING) == ([404, 404], True)


def test_a_valid_length_keeps_the_connection_for_the_next_request(port: int) -> None:
    raw = request("POST", "Content-Length: 5", body=b"x" * 5) + FOLLOWING
    assert exchange(port, raw) == ([404, 404], True)


def test_a_length_over_the_limit_is_413_unread(port: int) -> None:
    raw = request("POST", f"Content-Length: {LIMIT + 1}")  # no body is ever sent
    assert exchange(port, raw) == ([413], True)
    assert exchange(port, request("POST", "Content-Length: 99999999999999999999999")) == (
        [413],
        True,
    )


def test_a_chunked_body_is_read_and_the_next_request_served(port: int) -> None:
    body = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: x\r\n\r\n"
    raw = request("POST", "Transfer-Encoding: chunked", body=body) + FOLLOWING
    assert exchange(port, raw) == ([404, 404], True)


@pytest.mark.parametrize(
    ("coding", "body"),
    [
        ("chunked", b"zz\r\nhello\r\n0\r\n\r\n"),  # not a hex size
        ("chunked", b"9\r\nhello\r\n0\r\n\r\n"),  # shorter than its size
        ("gzip", b"abc"),  # the last coding is not chunked: no way to find the end
    ],
)
def test_a_malformed_chunked_body_is_400(port: int, coding: str, body: bytes) -> None:
    raw = request("POST", f"Transfer-Encoding: {coding}", body=body) + FOLLOWING
    assert exchange(port, raw) == ([400], True)


def test_a_chunked_body_over_the_limit_is_413(port: int) -> None:
    chunk = b"%x\r\n" % (LIMIT // 2) + b"x" * (LIMIT // 2) + b"\r\n"
    raw = request("POST", "Transfer-Encoding: chunked", body=chunk * 3 + b"0\r\n\r\n")
    assert exchange(port, raw) == ([413], True)
