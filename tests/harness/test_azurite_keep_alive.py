"""`services.azurite(keep_alive_s=...)`: Azurite keeps an idle client connection open that
long (its default closes it after 5 s, which a reused connection can meet mid-request)."""

from __future__ import annotations

import socket

import pytest

from harness import services

pytestmark = pytest.mark.services  # starts Azurite itself (twice), no fixture says so


def _idle_connection_closed_within(port: int, seconds: float) -> bool:
    """One keep-alive request on a fresh connection, then: does the server close it (the
    event: recv returns b"") before `seconds` of idleness?"""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /devstoreaccount1?comp=list HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Connection: keep-alive\r\n\r\n")  # fmt: skip
        answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 ")
        sock.settimeout(seconds)
        try:
            while True:
                if not sock.recv(65536):
                    return True
        except TimeoutError:
            return False


def test_an_idle_connection_stays_open_for_the_keep_alive_asked() -> None:
    with services.azurite(in_memory=True, keep_alive_s=60) as kept:
        assert not _idle_connection_closed_within(kept.blob_port, 7.0)
    with services.azurite(in_memory=True) as default:
        assert _idle_connection_closed_within(default.blob_port, 7.0)
