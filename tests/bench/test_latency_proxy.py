"""The latency proxy adds the round trip it is given, and passes bytes through unchanged."""

from __future__ import annotations

import socket
import socketserver
import threading
import time

from bench.latency_proxy import latency_proxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


def test_each_round_trip_takes_at_least_the_added_delay() -> None:
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo) as echo:
        threading.Thread(target=echo.serve_forever, daemon=True).start()
        try:
            port = echo.server_address[1]
            times = []
            with (
                latency_proxy("127.0.0.1", port, 0.02) as proxy_port,
                socket.create_connection(("127.0.0.1", proxy_port)) as conn,
            ):
                for i in range(5):
                    started = time.perf_counter()
                    conn.sendall(f"ping {i}".encode())
                    assert conn.recv(100) == f"ping {i}".encode()
                    times.append(time.perf_counter() - started)
        finally:
            echo.shutdown()
    assert min(times) >= 0.02
