"""One Azurite per benchmark run: started here, or reused when `bench all` already started one.

`bench all` sets BENCH_AZURITE to the connection string of its private Azurite, so every
benchmark in the run measures the same emulator; a benchmark run alone starts its own.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import psutil
from blobsingleton import StorageAccount
from blobsingleton.config import from_settings

from devhost.request_counting import RequestCounter
from harness import services

SHARED = "BENCH_AZURITE"


@contextlib.contextmanager
def azurite_storage(*, in_memory: bool = False, keep_alive_s: int | None = None) -> Iterator[str]:
    """Point AzureWebJobsStorage at the run's Azurite for the block; yields its connection.

    `in_memory`: an Azurite of its own started here keeps its data in memory only;
    `keep_alive_s`: how long it keeps an idle connection open (`services.azurite`)."""
    shared = os.environ.get(SHARED)
    if shared:
        os.environ["AzureWebJobsStorage"] = shared
        yield shared
        return
    with services.azurite(in_memory=in_memory, keep_alive_s=keep_alive_s) as azurite:
        os.environ["AzureWebJobsStorage"] = azurite.connection_string
        yield azurite.connection_string


def azurite_process() -> psutil.Process | None:
    """The run's Azurite (the one serving AzureWebJobsStorage's blob port) when this process
    started it; None when it runs elsewhere. A test process may have started several."""
    port = str(urlsplit(from_settings("AzureWebJobsStorage").blob_service().url).port)
    for child in psutil.Process().children(recursive=True):
        try:
            command = child.cmdline()
        except psutil.Error:
            continue
        if any("azurite" in part for part in command) and _option(command, "--blobPort") == port:
            return child
    return None


def _option(command: list[str], name: str) -> str | None:
    return next((command[i + 1] for i, part in enumerate(command[:-1]) if part == name), None)


def wait_for_idle_storage(
    idle_cores: float = 0.1, window: float = 0.25, timeout: float = 30.0
) -> float:
    """Wait until the run's Azurite has used under `idle_cores` of a core over one `window`
    (at most `timeout` seconds); returns the seconds waited.

    Deleting a storm's thousands of records and its queues keeps the emulator busy after the
    deletes have returned; whatever runs next would pay for it (the first alternative of the
    next storm measured 1.5x slower than alone). Each measured run starts on an idle emulator.
    """
    process = azurite_process()
    started = time.monotonic()
    if process is None:
        return 0.0
    while time.monotonic() - started < timeout:
        try:
            before = sum(process.cpu_times()[:2])
            time.sleep(window)  # sampling the emulator's CPU, not waiting for an outcome
            if sum(process.cpu_times()[:2]) - before < idle_cores * window:
                break
        except psutil.Error:
            break
    return time.monotonic() - started


def counted_account(counter: RequestCounter) -> StorageAccount:
    """The AzureWebJobsStorage account with every request counted by `counter`."""
    return from_settings("AzureWebJobsStorage").with_options(raw_request_hook=counter)


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0-100, nearest rank) of `values`; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[rank]


def spread(values: list[float], digits: int = 3) -> dict[str, float | int | None]:
    """min / median / max (and count) of `values`, rounded."""

    def r(v: float | None) -> float | None:
        return None if v is None else round(v, digits)

    return {
        "n": len(values),
        "min": r(min(values)) if values else None,
        "median": r(percentile(values, 50)),
        "max": r(max(values)) if values else None,
    }
