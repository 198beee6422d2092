"""In-memory backends and trigger builders for unit-testing your own `@once` and
`@singleton` functions, every busy policy included.

    from blobsingleton.testing import memory_backends, queue_message

    def test_the_email_goes_out_once() -> None:
        with memory_backends() as memory:
            notify(queue_message({"event_id": "e1"}))
            notify(queue_message({"event_id": "e1"}))  # a duplicate: not sent again
        assert sent == ["e1"]
        assert memory.records_of(notify).get("email-e1").status == Status.COMPLETED

Inside `memory_backends()`, every `@once` without its own `storage=` keeps its records in
`memory.records_of(fn)` (`memory.records` for `scope="app"`), every `@singleton` takes its
leases from `memory.locks`, a `Busy.DEFER` puts its copy in `memory.deferred` (one
`DeferredMessage(queue, body, delay)` each, nothing sent), and a timer's `{occurrence}` is
judged at `memory.clock`'s time (and a run-once record stamped with it, so a timer's ledger,
`blobsingleton.timers`, sees catch-ups and late occurrences on it): no Azurite, no storage
setting, milliseconds. All keep storage's rules: conditional writes (etags), expiry in
`memory.clock` (a `FakeClock` a test moves with `advance()`), a lease free once expired, a
fencing token incremented per acquisition.

`queue_message`, `timer_request` and `http_request` build the trigger arguments as the worker
does (with `azure.functions`' own converters, from the data and metadata the host sends).

The pieces work alone too: `@once(storage=MemoryRecordStore())`, `MemoryLease` (a `BaseLease` on
`MemoryLocks`). `RequestCounter` counts what your code sends to real storage: pass it as the
`raw_request_hook` client option (`blobsingleton.config.set_client_options`).
"""

from __future__ import annotations

import importlib.util

try:  # the kit's builders and checks read what azure-functions makes: refuse without it
    _FUNCTIONS = importlib.util.find_spec("azure.functions")
except (ImportError, ValueError):  # no `azure` package at all (or one set aside)
    _FUNCTIONS = None
if _FUNCTIONS is None:
    raise ImportError(
        "blobsingleton.testing needs the azure-functions package (its trigger arguments are "
        "built by azure-functions' own converters): install the library's [test] extra, pip "
        "install './packages/blobsingleton[test]' from its repository (pip install "
        "'blobsingleton[test]' once it is on PyPI), or azure-functions itself (a function "
        "app's requirements.txt names it)",
        name="blobsingleton.testing",
    )

import contextlib
import itertools
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from blobsingleton import _backends
from blobsingleton._keys import function_scope
from blobsingleton._lease import DEFAULT_PERIOD, BaseLease, check_limit, slot_name
from blobsingleton._records import Record, RecordStore, Status
from blobsingleton.errors import LeaseLost, RecordConflict, StorageUnavailable

if TYPE_CHECKING:
    import azure.functions as func  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from azure.functions.timer import TimerRequest  # type: ignore[import-untyped, import-not-found, unused-ignore]


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
    for storage's (`written_at`, `read_at`); `requests` counts calls. No speed layer: calls
    cost nothing to save, and the records' times are `clock`'s, not the process's."""

    speed_layer = False

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
    claiming `key`: a record in progress, expiring in `in_progress_timeout` s (0: at once) on
    the store's clock (a `MemoryRecordStore`'s), else the wall clock."""
    now = store.clock() if isinstance(store, MemoryRecordStore) else time.time()
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
    `drive_renewal=True` to renew only when the test calls `renew_now()`. `limit` above 1: up
    to that many holders, each on a slot of its own (`{key}@slot{i}` in `locks`), as
    `LeaseSemaphore`."""

    def __init__(
        self,
        key: str,
        locks: MemoryLocks,
        period: float = DEFAULT_PERIOD,
        *,
        drive_renewal: bool = False,
        limit: int = 1,
        **options: Any,
    ) -> None:
        super().__init__(key, period=period, clock=locks.clock, **options)
        self.locks = locks
        self.owner: Any = None
        self._drive_renewal = drive_renewal
        self._lease_id = ""
        self._names = (
            [key] if check_limit(limit) == 1 else [slot_name(key, i) for i in range(limit)]
        )
        self._name = self._names[0]

    def _try_acquire(self) -> int | None:
        self._lease_id = str(uuid.uuid4())
        for name in self._names:
            token = self.locks.acquire(name, self._lease_id, self.period)
            if token is not None:
                self._name = name
                return token
        return None

    def _renew(self) -> None:
        self.locks.renew(self._name, self._lease_id, self.period)

    def _release(self) -> None:
        self.locks.release(self._name, self._lease_id)

    def _start_renewing(self) -> None:
        if not self._drive_renewal:
            super()._start_renewing()

    def renew_now(self) -> float | None:
        """One renewal step: the wait before the next one, or None once lost."""
        return self._renew_step()


class DeferredMessage(NamedTuple):
    """A copy `Busy.DEFER` re-enqueued: on `queue` (its `%SETTING%` resolved), with `body`,
    visible after `delay` seconds."""

    queue: str
    body: bytes
    delay: int

    def message(self, *, dequeue_count: int = 1) -> func.QueueMessage:
        """The copy as its delivery would bind it: a new message with this body."""
        return queue_message(self.body, dequeue_count=dequeue_count)


@dataclass
class MemoryBackends:
    """The backends `memory_backends()` puts in place: one clock, records and locks, and the
    copies DEFER re-enqueued. `records` holds the app's records; a function's own are in
    `records_of(fn)`, its locks `lock_name`; `deferred` lists what DEFER sent, in order."""

    clock: FakeClock = field(default_factory=FakeClock)
    records: MemoryRecordStore = field(init=False)
    locks: MemoryLocks = field(init=False)
    scoped: dict[str, MemoryRecordStore] = field(default_factory=dict)
    deferred: list[DeferredMessage] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.records = MemoryRecordStore(self.clock)
        self.locks = MemoryLocks(self.clock)

    def record_store(self, *, scope: str | None = None, **_: Any) -> RecordStore:
        if scope is None:
            return self.records
        return self.scoped.setdefault(scope, MemoryRecordStore(self.clock))

    def records_of(self, fn: Callable[..., Any]) -> MemoryRecordStore:
        """The records of `@once` function `fn`'s own scope (`fn` under a trigger decorator
        too)."""
        scope = function_scope(_user_function(fn))
        return self.scoped.setdefault(scope, MemoryRecordStore(self.clock))

    def lease(
        self, key: str, *, period: float = DEFAULT_PERIOD, scope: str | None = None,
        limit: int = 1, **_: Any,
    ) -> BaseLease:  # fmt: skip
        name = key if scope is None else f"{scope}/{key}"
        return MemoryLease(name, self.locks, period, limit=limit)

    def lock_name(self, fn: Callable[..., Any], key: str) -> str:
        """The name in `locks` of `@singleton` function `fn`'s own lease on `key`."""
        return f"{function_scope(_user_function(fn))}/{key}"

    def send_message(self, queue: str, body: bytes, delay: int) -> str:
        """DEFER's re-enqueue: kept in `deferred`; returns the copy's new message id."""
        self.deferred.append(DeferredMessage(queue, bytes(body), delay))
        return str(uuid.uuid4())

    def now(self) -> datetime:
        """`clock`'s time, at which a timer's `{occurrence}` is judged."""
        return datetime.fromtimestamp(self.clock(), UTC)


def _user_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, or the function a trigger decorator (`@bp.queue_trigger`...) registered: its
    `azure.functions` FunctionBuilder's, through the public `build().get_user_function()`."""
    if hasattr(fn, "__qualname__"):
        return fn
    build = getattr(fn, "build", None)
    if not callable(build):
        raise TypeError(f"{fn!r} is neither a function nor a trigger decorator's")
    user_function: Callable[..., Any] = build().get_user_function()
    return user_function


@contextlib.contextmanager
def memory_backends(clock: FakeClock | None = None) -> Iterator[MemoryBackends]:
    """Run `@once` and `@singleton` on in-memory backends inside the block (see the module)."""
    backends = MemoryBackends(clock or FakeClock())
    previous = _backends.set_backends(backends)
    try:
        yield backends
    finally:
        _backends.set_backends(previous)


def _utc(moment: datetime) -> datetime:
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)


def queue_message(
    body: str | bytes | Mapping[str, Any] | list[Any],
    *,
    id: str | None = None,
    dequeue_count: int = 1,
    pop_receipt: str | None = None,
    inserted_at: datetime | None = None,
    expires_at: datetime | None = None,
    next_visible_at: datetime | None = None,
) -> func.QueueMessage:
    """A `func.QueueMessage` as the worker binds it: `azure.functions`' own
    `QueueMessageInConverter` decodes `body` (a dict or list: its JSON) with the trigger
    metadata the host sends (Id, DequeueCount, PopReceipt, InsertionTime, ExpirationTime,
    NextVisibleTime, and a JSON object body's top-level fields, which replace a same-named one
    as the host's case-insensitive binding data does). `id` and `pop_receipt`: fresh by
    default; `inserted_at`: now; `expires_at`: 7 days after it; `next_visible_at`: in 10
    minutes. (devhost binds each message it delivers with this function.)"""
    from azure.functions import meta  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from azure.functions.queue import QueueMessageInConverter  # type: ignore[import-untyped, import-not-found, unused-ignore]

    if isinstance(body, (Mapping, list)):
        body = json.dumps(body)
    raw = body.encode("utf-8") if isinstance(body, str) else bytes(body)
    inserted = _utc(inserted_at or datetime.now(UTC))

    def when(moment: datetime) -> meta.Datum:
        return meta.Datum(type="json", value=json.dumps(moment.isoformat()))

    metadata = {
        "QueueTrigger": meta.Datum(type="string", value=raw.decode("utf-8", "replace")),
        "Id": meta.Datum(type="string", value=id or str(uuid.uuid4())),
        "DequeueCount": meta.Datum(type="int", value=dequeue_count),
        "InsertionTime": when(inserted),
        "ExpirationTime": when(_utc(expires_at or inserted + timedelta(days=7))),
        "NextVisibleTime": when(_utc(next_visible_at or datetime.now(UTC) + timedelta(minutes=10))),
        "PopReceipt": meta.Datum(type="string", value=pop_receipt or uuid.uuid4().hex),
    }
    with contextlib.suppress(ValueError, UnicodeDecodeError, RecursionError):
        fields = json.loads(raw)
        if isinstance(fields, dict):
            by_lower = {name.lower(): name for name in metadata}
            for name, value in fields.items():
                found = by_lower.setdefault(str(name).lower(), str(name))
                metadata[found] = meta.Datum(type="json", value=json.dumps(value))
    try:
        data = meta.Datum(type="string", value=raw.decode("utf-8"))
    except UnicodeDecodeError:
        data = meta.Datum(type="bytes", value=raw)
    message: func.QueueMessage = QueueMessageInConverter.decode(data, trigger_metadata=metadata)
    return message


def timer_request(
    occurrence: datetime | None = None,
    *,
    past_due: bool = False,
    last: datetime | None = None,
) -> TimerRequest:
    """A `func.TimerRequest` as the worker binds it (`azure.functions`' `TimerRequestConverter`
    on the host's JSON). For an `occurrence` (an aware or UTC datetime): the schedule status a
    host with its schedule monitor sends firing it (`Next` = the occurrence; `Last` = `last`,
    else never; `past_due` for a catch-up of a missed one), which `{occurrence}` keys read.
    Without one: no status (`use_monitor=False`, or a schedule under a minute), and
    `{occurrence}` is the schedule's occurrence at the time of the call (inside
    `memory_backends()`: `memory.clock`'s)."""
    from azure.functions import meta  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from azure.functions.timer import TimerRequestConverter  # type: ignore[import-untyped, import-not-found, unused-ignore]

    never = "0001-01-01T00:00:00"
    status = None
    if occurrence is not None:
        status = {
            "Last": _utc(last).isoformat() if last else never,
            "Next": _utc(occurrence).isoformat(),
            "LastUpdated": _utc(last).isoformat() if last else never,
        }
    info = {"Schedule": {"AdjustForDST": True}, "ScheduleStatus": status, "IsPastDue": past_due}
    data = meta.Datum(type="json", value=json.dumps(info))
    request: TimerRequest = TimerRequestConverter.decode(data, trigger_metadata={})
    return request


def http_request(
    method: str = "GET",
    url: str = "http://localhost:7071/api/",
    *,
    body: str | bytes | Mapping[str, Any] | list[Any] = b"",
    headers: Mapping[str, str] | None = None,
    params: Mapping[str, str] | None = None,
    route_params: Mapping[str, str] | None = None,
) -> func.HttpRequest:
    """A `func.HttpRequest` as the worker binds it (`azure.functions`' `HttpRequestConverter` on
    the host's http datum): `params` is the query, `route_params` the route's values, `body`
    bytes, text, or a dict or list sent as JSON (with its content type)."""
    from azure.functions import meta  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from azure.functions.http import HttpRequestConverter  # type: ignore[import-untyped, import-not-found, unused-ignore]

    sent = {k.lower(): v for k, v in (headers or {}).items()}
    if isinstance(body, (Mapping, list)):
        content = meta.Datum(type="json", value=json.dumps(body))
        sent.setdefault("content-type", "application/json")
    elif isinstance(body, str):
        content = meta.Datum(type="string", value=body)
    else:
        content = meta.Datum(type="bytes", value=bytes(body))

    def datums(values: Mapping[str, str] | None) -> dict[str, meta.Datum]:
        return {k: meta.Datum(type="string", value=v) for k, v in (values or {}).items()}

    value = {
        "method": meta.Datum(type="string", value=method.upper()),
        "url": meta.Datum(type="string", value=url),
        "headers": datums(sent),
        "query": datums(params),
        "params": datums(route_params),
        "body": content,
    }
    request: func.HttpRequest = HttpRequestConverter.decode(
        meta.Datum(type="http", value=value), trigger_metadata={}
    )
    return request


__all__ = [
    "DeferredMessage", "FakeClock", "MemoryBackends", "MemoryLease", "MemoryLocks",
    "MemoryRecordStore", "RequestCounter", "blob_created_event", "blob_input_stream",
    "check_busy_policies", "check_busy_policy", "cloud_event", "cosmos_documents", "crashed_run",
    "event_grid_event", "event_hub_event", "event_hub_events", "forget_remembered_records",
    "http_request", "memory_backends", "queue_message", "service_bus_message",
    "service_bus_messages", "timer_request",
]  # fmt: skip


def check_busy_policies(app: Any) -> None:
    """Refuse (`TypeError`, naming what fits) a guarded function of `app` whose busy policy
    cannot work on the trigger its binding names (DEFER on a Service Bus function): what a host
    that knew the library would check when it indexes the app. `app` is a `func.FunctionApp`
    (indexed again at each call, so two tests may check one app) or what its
    `get_functions()` returned."""
    from blobsingleton import _busy

    _busy.check_busy_policies(_indexed(app) if hasattr(app, "get_functions") else app)


def _indexed(app: Any) -> Any:
    """`app.get_functions()`, callable again: azure-functions remembers the names a call
    indexed (`functions_bindings`) and refuses them the next time as duplicates; the names
    are set aside for this call and put back (without that attribute: a plain call)."""
    if not hasattr(app, "functions_bindings"):
        return app.get_functions()
    saved = app.functions_bindings
    app.functions_bindings = None
    try:
        return app.get_functions()
    finally:
        app.functions_bindings = saved


def forget_remembered_records() -> None:
    """Forget the completed records this process remembers for 10 s, so the next look goes to
    storage as a new process's would (for tests and benchmarks that count requests)."""
    from blobsingleton import _speed

    _speed.forget_known()


# Trigger arguments built by azure-functions' own converters (the package is imported when a
# builder is called), and the busy-policy check a host or a test runs on indexed functions.
# (`name as name`: public re-exports, beside the names `__all__` lists.)
from blobsingleton._busy import check_busy_policy as check_busy_policy  # noqa: E402
from blobsingleton._trigger_kit import blob_created_event as blob_created_event  # noqa: E402
from blobsingleton._trigger_kit import blob_input_stream as blob_input_stream  # noqa: E402
from blobsingleton._trigger_kit import cloud_event as cloud_event  # noqa: E402
from blobsingleton._trigger_kit import cosmos_documents as cosmos_documents  # noqa: E402
from blobsingleton._trigger_kit import event_grid_event as event_grid_event  # noqa: E402
from blobsingleton._trigger_kit import event_hub_event as event_hub_event  # noqa: E402
from blobsingleton._trigger_kit import event_hub_events as event_hub_events  # noqa: E402
from blobsingleton._trigger_kit import service_bus_message as service_bus_message  # noqa: E402
from blobsingleton._trigger_kit import service_bus_messages as service_bus_messages  # noqa: E402
