"""The backends a test puts in place of Blob Storage: leases, record stores, DEFER's queue and the
clock a timer's `{occurrence}` is judged at (`blobsingleton.testing.memory_backends`); Blob
Storage's are built by the decorators that use them (`_singleton.default_lease`,
`_once._records_for`, `_busy.send_message`) when nothing is set; and the clock run-once
records are stamped by (`record_clock`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from blobsingleton._lease import BaseLease
    from blobsingleton._records import RecordStore


class Backends(Protocol):
    """Where decorators get their leases, record stores, DEFER's queue and the time a timer's
    `{occurrence}` is judged at (tests: in memory, on a fake clock)."""

    def record_store(self, **options: Any) -> RecordStore: ...

    def lease(self, key: str, **options: Any) -> BaseLease: ...

    def send_message(self, queue: str, body: bytes, delay: int) -> str: ...

    def now(self) -> datetime: ...


_backends: list[Backends] = []  # the backends set: none (Blob Storage's) or one


def set_backends(backends: Backends | None) -> Backends | None:
    """Use `backends` from now on (None: Blob Storage again); returns the previous ones."""
    previous = _backends[0] if _backends else None
    _backends.clear()
    if backends is not None:
        _backends.append(backends)
    return previous


def current_backends() -> Backends | None:
    """The backends set (None: Blob Storage's)."""
    return _backends[0] if _backends else None


def backends_now() -> datetime | None:
    """The time a timer invocation's `{occurrence}` is judged at: the backends' (a test's
    clock), else None (the wall clock)."""
    return _backends[0].now() if _backends else None


def record_clock() -> Callable[[], float]:
    """The clock run-once records are stamped by: the test kit's inside `memory_backends()`
    (so a ledger judges a run's start on the kit's clock), else the wall clock."""
    clock = getattr(current_backends(), "clock", None)
    return clock if callable(clock) else time.time
