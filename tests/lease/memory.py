"""An in-memory lease backend with an injectable clock, for millisecond state-machine tests.

It keeps Blob Storage's lease rules (a lease is free once expired; its holder may renew it
after expiry as long as nobody leased it since; every acquisition increments the fencing
token), behind the library's own `BaseLease` abstraction. Renewal is driven by the test, one
step at a time, instead of by a thread waiting real seconds.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from blobsingleton.errors import LeaseLost, StorageUnavailable
from blobsingleton.leases import BaseLease


class FakeClock:
    """Seconds that pass only when a test says so."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class _Lock:
    token: int = 0
    lease_id: str | None = None
    expires_at: float = 0.0


@dataclass
class MemoryLocks:
    """The lock table: what storage would hold, plus failures a test can inject."""

    clock: FakeClock
    locks: dict[str, _Lock] = field(default_factory=dict)
    #: The next this-many renewals fail as if storage did not answer.
    failing_renewals: int = 0
    requests: int = 0

    def acquire(self, key: str, lease_id: str, period: float) -> int | None:
        self.requests += 1
        lock = self.locks.setdefault(key, _Lock())
        if lock.lease_id is not None and self.clock() < lock.expires_at:
            return None
        lock.lease_id, lock.expires_at = lease_id, self.clock() + period
        lock.token += 1
        return lock.token

    def renew(self, key: str, lease_id: str, period: float) -> None:
        self.requests += 1
        if self.failing_renewals:
            self.failing_renewals -= 1
            raise StorageUnavailable("renew", "connection reset (injected)")
        lock = self.locks[key]
        if lock.lease_id != lease_id:
            raise LeaseLost(key, lock.token, "renew: LeaseIdMismatchWithLeaseOperation")
        lock.expires_at = self.clock() + period

    def release(self, key: str, lease_id: str) -> None:
        self.requests += 1
        lock = self.locks[key]
        if lock.lease_id != lease_id:
            raise LeaseLost(key, lock.token, "release: LeaseIdMismatchWithLeaseOperation")
        lock.lease_id = None

    def break_lease(self, key: str) -> None:
        self.locks[key].lease_id = None

    def leased(self, key: str) -> bool:
        lock = self.locks.get(key)
        return bool(lock and lock.lease_id and self.clock() < lock.expires_at)


class MemoryLease(BaseLease):
    """`BaseLease` on `MemoryLocks`; renewals happen when the test calls `renew_now()`."""

    def __init__(self, key: str, locks: MemoryLocks, period: float = 15.0, **options: object):
        super().__init__(key, period=period, clock=locks.clock, **options)  # type: ignore[arg-type]
        self.locks = locks
        self._lease_id = ""

    def _try_acquire(self) -> int | None:
        self._lease_id = str(uuid.uuid4())
        return self.locks.acquire(self.key, self._lease_id, self.period)

    def _renew(self) -> None:
        self.locks.renew(self.key, self._lease_id, self.period)

    def _release(self) -> None:
        self.locks.release(self.key, self._lease_id)

    def _start_renewing(self) -> None:
        """No thread: the test drives renewal with `renew_now()`."""

    def renew_now(self) -> float | None:
        """One renewal step: the wait before the next one, or None once lost."""
        return self._renew_step()
