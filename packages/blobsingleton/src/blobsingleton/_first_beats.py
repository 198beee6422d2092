"""One thread per process that starts `@once` heartbeats when first due (docs/internals.md)."""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("blobsingleton")


class _FirstBeats:
    def __init__(self) -> None:
        self._due: list[tuple[float, int, threading.Event, Callable[[], None]]] = []
        self._changed = threading.Condition()
        self._count = 0
        self._thread: threading.Thread | None = None

    def schedule(self, at: float, stopped: threading.Event, start: Callable[[], None]) -> None:
        """Call `start` at monotonic time `at`, unless `stopped` is set by then."""
        with self._changed:
            self._count += 1
            heapq.heappush(self._due, (at, self._count, stopped, start))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="once-first-beats", daemon=True
                )
                self._thread.start()
            elif self._due[0][1] == self._count:
                self._changed.notify()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._due or self._due[0][0] > time.monotonic():
                    timeout = self._due[0][0] - time.monotonic() if self._due else None
                    self._changed.wait(timeout)
                _, _, stopped, start = heapq.heappop(self._due)
            if not stopped.is_set():
                try:
                    start()
                except Exception:  # never let one run's start stop every later one
                    log.exception("run-once: could not start a heartbeat")


first_beats = _FirstBeats()
