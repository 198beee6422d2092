"""Count the storage requests the app sends: a hook the host adds to the clients it makes.

The app and the library never count anything themselves. The local host, the benchmarks and
the tests install `request_counter` as the `raw_request_hook` client option of every account
built from settings (`blobsingleton.config.set_client_options`); the SDK calls it once per attempt.
"""

from __future__ import annotations

import threading
from typing import Any

import blobsingleton.config
from blobsingleton.testing import RequestCounter

__all__ = ["RequestCounter", "ServiceRequestCounter", "install", "request_counter"]


class ServiceRequestCounter(RequestCounter):
    """A `RequestCounter` that also counts blob requests apart, by the SDK that sent each one
    (its User-Agent names the blob, queue or table package), whatever endpoint it went to."""

    def __init__(self) -> None:
        super().__init__()
        self._blob = 0
        self._blob_lock = threading.Lock()

    def __call__(self, request: Any) -> None:
        super().__call__(request)
        agent = str(request.http_request.headers.get("User-Agent", ""))
        if "storage-blob" in agent:
            with self._blob_lock:
                self._blob += 1

    def blob_total(self) -> int:
        with self._blob_lock:
            return self._blob

    def reset(self) -> None:
        super().reset()
        with self._blob_lock:
            self._blob = 0


#: Counts the requests of every client built from app settings, once `install()` ran.
request_counter = ServiceRequestCounter()


def install() -> RequestCounter:
    """Attach `request_counter` to every storage client built from settings from now on."""
    blobsingleton.config.set_client_options(raw_request_hook=request_counter)
    return request_counter
