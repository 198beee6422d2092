"""The fault proxy passes bytes through, injects each fault kind, and is deterministic per seed."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from harness.fault_proxy import FaultProxy, FaultRates


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _round_trip(port: int, payload: bytes, timeout: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(payload)
        received = b""
        while len(received) < len(payload):
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionResetError("closed before the echo came back")
            received += chunk
        return received


def test_without_faults_bytes_pass_through(echo_port: int) -> None:
    with FaultProxy(echo_port, FaultRates(), seed=1) as proxy:
        payload = bytes(range(256)) * 1000
        assert _round_trip(proxy.listen_port, payload) == payload
        assert sum(proxy.counts.values()) == 0


def test_reset_drops_the_connection(echo_port: int) -> None:
    with FaultProxy(echo_port, FaultRates(reset=1.0), seed=1) as proxy:
        with pytest.raises(OSError):
            _round_trip(proxy.listen_port, b"hello")
        assert proxy.counts["reset"] == 1


def test_stall_outlasts_the_client_timeout(echo_port: int) -> None:
    with FaultProxy(echo_port, FaultRates(stall=1.0, stall_seconds=5), seed=1) as proxy:
        with pytest.raises(TimeoutError):
            _round_trip(proxy.listen_port, b"hello", timeout=0.5)
        assert proxy.counts["stall"] == 1


def test_latency_still_delivers(echo_port: int) -> None:
    with FaultProxy(echo_port, FaultRates(latency=1.0, latency_seconds=0.05), seed=1) as proxy:
        assert _round_trip(proxy.listen_port, b"hello") == b"hello"
        assert proxy.counts["latency"] == 1


def test_disabled_proxy_injects_nothing(echo_port: int) -> None:
    with FaultProxy(echo_port, FaultRates(reset=1.0), seed=1) as proxy:
        proxy.set_enabled(False)
        assert _round_trip(proxy.listen_port, b"hello") == b"hello"
        assert sum(proxy.counts.values()) == 0


def test_same_seed_same_fault_sequence() -> None:
    rates = FaultRates(reset=0.2, stall=0.1, latency=0.3)
    a, b, c = (FaultProxy(1, rates, seed=s) for s in (7, 7, 8))
    seq_a = [a.draw() for _ in range(200)]
    assert seq_a == [b.draw() for _ in range(200)]
    assert seq_a != [c.draw() for _ in range(200)]
    assert {"reset", "stall", "latency", None} <= set(seq_a)


def test_rates_are_validated() -> None:
    with pytest.raises(ValueError, match="sum to <= 1"):
        FaultRates(reset=0.6, stall=0.6)
