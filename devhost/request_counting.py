"""Count the storage requests the app sends: a hook the host adds to the clients it makes.

The app and the library never count anything themselves. The local host, the benchmarks and
the tests install `request_counter` as the `raw_request_hook` client option of every account
built from settings (`blobsingleton.config.set_client_options`); the SDK calls it once per attempt.
"""

from __future__ import annotations

import blobsingleton.config
from blobsingleton.testing import RequestCounter

__all__ = ["RequestCounter", "install", "request_counter"]


#: Counts the requests of every client built from app settings, once `install()` ran.
request_counter = RequestCounter()


def install() -> RequestCounter:
    """Attach `request_counter` to every storage client built from settings from now on."""
    blobsingleton.config.set_client_options(raw_request_hook=request_counter)
    return request_counter
