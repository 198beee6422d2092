"""Backends a test puts in place of Blob Storage: leases, record stores, DEFER's queue and the
clock a timer's `{occurrence}` is judged at (`blobsingleton.testing.memory_backends`).

Below every backend: it holds what was set and imports none of them; `_defaults` builds Blob
Storage's when nothing is set (docs/internals.md)."""

from __future__ import annotations

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


_backends: list[Backends] = []


def set_backends(backends: Backends | None) -> Backends | None:
    """Use `backends` from now on (None: Blob Storage again); returns the previous ones."""
    previous = _backends[0] if _backends else None
    _backends.clear()
    if backends is not None:
        _backends.append(backends)
    return previous


def current() -> Backends | None:
    """The backends set (None: Blob Storage's)."""
    return _backends[0] if _backends else None


def now() -> datetime | None:
    """The time a timer invocation's `{occurrence}` is judged at: the backends' (a test's
    clock), else None (the wall clock)."""
    return _backends[0].now() if _backends else None
