"""One thread per process that starts `@once` heartbeats when they are first due."""

from __future__ import annotations

import heapq
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

_library_log = logging.getLogger("blobsingleton")


class FirstBeats:
    """One thread per process that starts `@once` heartbeats when first due."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, threading.Event, weakref.WeakMethod[Any]]] = []
        self._changed = threading.Condition()
        self._count = 0
        self._thread: threading.Thread | None = None

    def schedule(self, at: float, stopped: threading.Event, start: Callable[[], None]) -> None:
        """Call method `start` at monotonic time `at`, unless `stopped` is set by then or its
        object is gone. The object is held weakly: most runs are over long before their first
        beat, and held until then (a third of the in-progress timeout) a storm's finished runs
        would pile up with their results."""
        with self._changed:
            while self._due and self._due[0][2].is_set():
                heapq.heappop(self._due)  # runs over: their entries leave as they reach the top
            self._count += 1
            heapq.heappush(self._due, (at, self._count, stopped, weakref.WeakMethod(start)))
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
                _, _, stopped, method = heapq.heappop(self._due)
            start = method()
            if start is not None and not stopped.is_set():
                try:
                    start()
                except Exception:  # never let one run's start stop every later one
                    _library_log.exception("run-once: could not start a heartbeat")


first_beats = FirstBeats()
