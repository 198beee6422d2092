"""How the host retries its own storage requests, as the Functions host's clients do.

The host's queue listener (polling, delete, visibility renewal, poison copies) and its timer
blobs use Azure.Core's default retry options, which the storage extensions keep: 3 retries,
exponential from 0.8 s, each delay drawn within 20 % of its value, at most 60 s. The Python
Storage SDK's own default (`ExponentialRetry`) first waits 15 s plus 3 (then 24, 42 s):
a local host waiting that long would delete a message 18 s after it ran, past a short
visibility timeout, where the real host retries within a second.
"""

from __future__ import annotations

import random
from typing import Any

from azure.storage.blob import ExponentialRetry

RETRIES = 3
DELAY_S = 0.8
MAX_DELAY_S = 60.0


class HostRetry(ExponentialRetry):
    """Azure.Core's exponential retry: the n-th retry waits 2^(n-1) x 0.8 s (+-20 %)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(retry_total=RETRIES, random_jitter_range=0, **kwargs)

    def get_backoff_time(self, settings: dict[str, Any]) -> float:
        attempt = max(1, int(settings["count"]))
        jittered = random.uniform(0.8 * DELAY_S, 1.2 * DELAY_S)
        return float(min(MAX_DELAY_S, 2 ** (attempt - 1) * jittered))
