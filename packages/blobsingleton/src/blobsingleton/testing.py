"""In-memory backends for unit-testing your own `@once` and `@singleton` functions.

    from blobsingleton.testing import memory_backends

    def test_the_email_goes_out_once() -> None:
        with memory_backends() as memory:
            notify(message({"event_id": "e1"}))
            notify(message({"event_id": "e1"}))        # a duplicate: not sent again
        assert sent == ["e1"]
        assert memory.records_of(notify).get("email-e1").status == Status.COMPLETED

Inside `memory_backends()`, every `@once` without its own `store=` keeps its records in
`memory.records_of(fn)` (`memory.records` for `scope="app"`) and every `@singleton` takes its
leases from `memory.locks`: no Azurite, no settings, milliseconds. Both keep storage's rules:
conditional writes (etags), expiry in `memory.clock` (a `FakeClock` a test moves with
`advance()`), a lease free once expired, a fencing token incremented per acquisition.
`Busy.DEFER` still needs a queue: test it with `Busy.SKIP` or a callable, or on Azurite.

The pieces work alone too: `@once(store=MemoryRecordStore())`, `MemoryLease` (a `BaseLease` on
`MemoryLocks`). `RequestCounter` counts what your code sends to real storage: pass it as the
`raw_request_hook` client option (`blobsingleton.config.set_client_options`).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from blobsingleton import _defaults
from blobsingleton._keys import function_scope
from blobsingleton._lease import DEFAULT_PERIOD, BaseLease
from blobsingleton._records import Record, RecordStore, Status
from blobsingleton.errors import LeaseLost, RecordConflict, StorageUnavailable


class RequestCounter:
    """Counts every HTTP request (retries included) a storage client sends, by HTTP method."""

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


class FakeClock:
    """Seconds that pass only when a test says so (`advance`)."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class MemoryRecordStore(RecordStore):
    """Run-once records in a dict, with the blob store's conditional writes. `clock` stands
    for storage's (`written_at`, `read_at`); `requests` counts calls."""

    def __init__(self, clock: Any = None) -> None:
        self.clock = clock or FakeClock()
        self.records: dict[str, Record] = {}
        self._etags = itertools.count(1)
        self.requests = 0

    def _stamped(self, record: Record) -> Record:
        now = self.clock()
        stamped = record.with_(etag=f'"{next(self._etags)}"', written_at=now, read_at=now)
        self.records[record.key] = stamped
        return stamped

    def get(self, key: str) -> Record | None:
        self.requests += 1
        record = self.records.get(key)
        return None if record is None else record.with_(read_at=self.clock())

    def put_if_absent(self, record: Record) -> Record:
        self.requests += 1
        if record.key in self.records:
            raise RecordConflict("BlobAlreadyExists")
        return self._stamped(record)

    def replace(self, record: Record, etag: str) -> Record:
        self.requests += 1
        current = self.records.get(record.key)
        if current is None or current.etag != etag:
            raise RecordConflict("ConditionNotMet")
        return self._stamped(record)

    def delete(self, key: str, etag: str) -> None:
        self.requests += 1
        current = self.records.get(key)
        if current is None or current.etag != etag:
            raise RecordConflict("ConditionNotMet")
        del self.records[key]


def crashed_run(
    store: RecordStore, key: str, in_progress_timeout: float, *, owner: str = "crashed-instance"
) -> Record:
    """Leave in `store` what a `@once` run leaves when its process (`owner`) dies right after
    claiming `key`: a record in progress, expiring in `in_progress_timeout` s (0: at once)."""
    now = time.time()
    return store.put_if_absent(
        Record(
            key=key,
            status=Status.IN_PROGRESS,
            started_at=now,
            expires_at=now + in_progress_timeout,
            owner=owner,
            ttl=in_progress_timeout,
        )
    )


@dataclass
class _Lock:
    token: int = 0
    lease_id: str | None = None
    expires_at: float = 0.0


@dataclass
class MemoryLocks:
    """What storage would hold for leases: per key a token, a lease id and its expiry."""

    clock: Any = field(default_factory=FakeClock)
    locks: dict[str, _Lock] = field(default_factory=dict)
    #: The next this-many renewals fail as if storage did not answer.
    failing_renewals: int = 0
    requests: int = 0

    def acquire(self, key: str, lease_id: str, period: float) -> int | None:
        """The new token, or None while another lease on `key` has not expired."""
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
        """What an operator's break does: the holder loses the key at its next renewal."""
        self.locks[key].lease_id = None

    def leased(self, key: str) -> bool:
        lock = self.locks.get(key)
        return bool(lock and lock.lease_id and self.clock() < lock.expires_at)


class MemoryLease(BaseLease):
    """A `BaseLease` on `MemoryLocks`. Renewal runs in a thread as usual; pass
    `drive_renewal=True` to renew only when the test calls `renew_now()`."""

    def __init__(
        self,
        key: str,
        locks: MemoryLocks,
        period: float = DEFAULT_PERIOD,
        *,
        drive_renewal: bool = False,
        **options: Any,
    ) -> None:
        super().__init__(key, period=period, clock=locks.clock, **options)
        self.locks = locks
        self.owner: Any = None
        self._drive_renewal = drive_renewal
        self._lease_id = ""

    def _try_acquire(self) -> int | None:
        self._lease_id = str(uuid.uuid4())
        return self.locks.acquire(self.key, self._lease_id, self.period)

    def _renew(self) -> None:
        self.locks.renew(self.key, self._lease_id, self.period)

    def _release(self) -> None:
        self.locks.release(self.key, self._lease_id)

    def _start_renewing(self) -> None:
        if not self._drive_renewal:
            super()._start_renewing()

    def renew_now(self) -> float | None:
        """One renewal step: the wait before the next one, or None once lost."""
        return self._renew_step()


@dataclass
class MemoryBackends:
    """The backends `memory_backends()` puts in place: one clock, records and locks. `records`
    holds the app's records; a function's own are in `records_of(fn)`, its locks `lock_name`."""

    clock: FakeClock = field(default_factory=FakeClock)
    records: MemoryRecordStore = field(init=False)
    locks: MemoryLocks = field(init=False)
    scoped: dict[str, MemoryRecordStore] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.records = MemoryRecordStore(self.clock)
        self.locks = MemoryLocks(self.clock)

    def record_store(self, *, scope: str | None = None, **_: Any) -> RecordStore:
        if scope is None:
            return self.records
        return self.scoped.setdefault(scope, MemoryRecordStore(self.clock))

    def records_of(self, fn: Callable[..., Any]) -> MemoryRecordStore:
        """The records of `@once` function `fn`'s own scope."""
        return self.scoped.setdefault(function_scope(fn), MemoryRecordStore(self.clock))

    def lease(
        self, key: str, *, period: float = DEFAULT_PERIOD, scope: str | None = None, **_: Any
    ) -> BaseLease:
        return MemoryLease(key if scope is None else f"{scope}/{key}", self.locks, period)

    def lock_name(self, fn: Callable[..., Any], key: str) -> str:
        """The name in `locks` of `@singleton` function `fn`'s own lease on `key`."""
        return f"{function_scope(fn)}/{key}"


@contextlib.contextmanager
def memory_backends(clock: FakeClock | None = None) -> Iterator[MemoryBackends]:
    """Run `@once` and `@singleton` on in-memory backends inside the block (see the module)."""
    backends = MemoryBackends(clock or FakeClock())
    previous = _defaults.set_backends(backends)
    try:
        yield backends
    finally:
        _defaults.set_backends(previous)


__all__ = [
    "FakeClock", "MemoryBackends", "MemoryLease", "MemoryLocks", "MemoryRecordStore",
    "RequestCounter", "crashed_run", "forget_remembered_records", "memory_backends",
]  # fmt: skip


def forget_remembered_records() -> None:
    """Forget the completed records this process remembers for 10 s, so the next look goes to
    storage as a new process's would (for tests and benchmarks that count requests)."""
    from blobsingleton import _record_watch

    _record_watch.forget_known()


# Trigger arguments built by azure-functions' own converters (the package is imported when a
# builder is called), and the busy-policy check a host or a test runs on indexed functions.
# (`name as name`: public re-exports, beside the names `__all__` lists.)
from blobsingleton._busy import check_busy_policies as check_busy_policies  # noqa: E402
from blobsingleton._busy import check_busy_policy as check_busy_policy  # noqa: E402
from blobsingleton._trigger_kit import blob_created_event as blob_created_event  # noqa: E402
from blobsingleton._trigger_kit import blob_input_stream as blob_input_stream  # noqa: E402
from blobsingleton._trigger_kit import cloud_event as cloud_event  # noqa: E402
from blobsingleton._trigger_kit import cosmos_documents as cosmos_documents  # noqa: E402
from blobsingleton._trigger_kit import event_grid_event as event_grid_event  # noqa: E402
from blobsingleton._trigger_kit import event_hub_event as event_hub_event  # noqa: E402
from blobsingleton._trigger_kit import event_hub_events as event_hub_events  # noqa: E402
from blobsingleton._trigger_kit import queue_message as queue_message  # noqa: E402
from blobsingleton._trigger_kit import service_bus_message as service_bus_message  # noqa: E402
from blobsingleton._trigger_kit import service_bus_messages as service_bus_messages  # noqa: E402
