"""A local callback receiver: records every POST with its Idempotency-Key and arrival time.

Used by the batch scenario, the fan-in benchmark and the job tests in place of the external
service a job announces its completion to. It answers `statuses` in turn (then 200), and
can hold its answers (`hold()`) so a test can kill the caller while the POST is in flight,
or dribble them (`dribble()`) one byte at a time, as a receiver that never quite answers.

It listens on loopback over plain http, which the app refuses unless told otherwise: every
run that posts to it gives the app RECEIVER_SETTINGS, explicitly.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: The app settings that let the app call this receiver (loopback, plain http): for tests,
#: the demo and the benchmarks only, never a deployment.
RECEIVER_SETTINGS = {
    "JOB_CALLBACK_ALLOWED_NETWORKS": "127.0.0.0/8",
    "JOB_CALLBACK_ALLOW_HTTP": "true",
}


@dataclass(frozen=True)
class CallbackPost:
    path: str
    idempotency_key: str | None
    body: Any
    received_at: float

    @property
    def job_id(self) -> str | None:
        return self.body.get("job_id") if isinstance(self.body, dict) else None


class CallbackReceiver:
    """An HTTP server on 127.0.0.1 (free port) for the duration of a `with` block."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        self._statuses = list(statuses or [])
        self._posts: list[CallbackPost] = []
        self._changed = threading.Condition()
        self._released = threading.Event()
        self._released.set()
        self._dribble: float | None = None
        self.answered = threading.Event()  # set when an answer ends, or its caller hung up
        self.arrived = threading.Event()  # set at each POST (tests clear it)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/callback"

    def __enter__(self) -> CallbackReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Record POSTs but do not answer them until the block ends."""
        self._released.clear()
        try:
            yield
        finally:
            self._released.set()

    @contextmanager
    def dribble(self, every: float) -> Iterator[None]:
        """Answer POSTs in the block one byte every `every` seconds (the status line first),
        for as long as the caller keeps reading."""
        self._dribble = every
        try:
            yield
        finally:
            self._dribble = None

    @property
    def posts(self) -> list[CallbackPost]:
        with self._changed:
            return list(self._posts)

    def by_job(self) -> dict[str, list[CallbackPost]]:
        grouped: dict[str, list[CallbackPost]] = defaultdict(list)
        for post in self.posts:
            grouped[str(post.job_id)].append(post)
        return dict(grouped)

    def wait_for(self, predicate: Callable[[list[CallbackPost]], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(list(self._posts)):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(min(remaining, 0.5))
        return True

    def _record(self, path: str, key: str | None, raw: bytes) -> int:
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        with self._changed:
            self._posts.append(CallbackPost(path, key, body, time.time()))
            status = self._statuses.pop(0) if self._statuses else 200
            self._changed.notify_all()
        self.arrived.set()
        return status

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                status = receiver._record(self.path, self.headers.get("Idempotency-Key"), raw)
                receiver._released.wait(120)
                payload = b'{"ok": true}' if status < 400 else b'{"error": "test"}'
                every = receiver._dribble
                with contextlib.suppress(OSError):  # the caller may have given up (timeout)
                    if every is not None:
                        self._dribble_answer(status, every)
                        return
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                receiver.answered.set()

            def _dribble_answer(self, status: int, every: float) -> None:
                head = f"HTTP/1.1 {status} OK\r\nContent-Type: text/plain\r\n".encode()
                try:
                    for byte in head + b"X-Slow: " + b"x" * 10_000:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(every)
                finally:
                    receiver.answered.set()
                    self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler
