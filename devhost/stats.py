"""Per-process invocation counters that a worker reports to the supervisor."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any


class WorkerStats:
    """Thread-safe counts of invocations, outcomes, poisoned messages and in-flight work, and
    when the last invocation ended."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self.invocations: Counter[str] = Counter()
        self.successes: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self.poisoned: Counter[str] = Counter()
        self._in_flight = 0
        #: When the last invocation ended (epoch seconds; None before any did).
        self.last_finished_at: float | None = None

    def started(self, function: str) -> None:
        with self._lock:
            self.invocations[function] += 1
            self._in_flight += 1

    def finished(self, function: str, ok: bool) -> None:
        with self._lock:
            (self.successes if ok else self.failures)[function] += 1
            self._in_flight -= 1
            self.last_finished_at = time.time()
            if self._in_flight == 0:
                self._idle.notify_all()

    def poisoned_one(self, function: str) -> None:
        with self._lock:
            self.poisoned[function] += 1

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    def wait_idle(self, timeout: float) -> bool:
        """True when no invocation is running (within `timeout` seconds)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "invocations": dict(self.invocations),
                "successes": dict(self.successes),
                "failures": dict(self.failures),
                "poisoned": dict(self.poisoned),
                "in_flight": self._in_flight,
                "last_finished_at": self.last_finished_at,
            }
