"""Count the storage requests the app sends: a hook the host adds to the clients it makes.

The app and the library never count anything themselves. The local host, the benchmarks and
the tests install `request_counter` as the `raw_request_hook` client option of every account
built from settings (`blobsingleton.config.set_client_options`); the SDK calls it once per attempt.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import blobsingleton
import blobsingleton.config


class RequestCounter:
    """Counts every HTTP request (retries included) a client sends, by HTTP method."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def __call__(self, request: Any) -> None:
        method = request.http_request.method
        with self._lock:
            self._counts[method] += 1

    def by_method(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()


#: Counts the requests of every client built from app settings, once `install()` ran.
request_counter = RequestCounter()


def install() -> RequestCounter:
    """Attach `request_counter` to every storage client built from settings from now on."""
    blobsingleton.config.set_client_options(raw_request_hook=request_counter)
    return request_counter
