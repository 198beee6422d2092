"""`@once(key)`: run a function's work once per key (docs/internals.md)."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, Literal, overload

from blobsingleton import _batch, _misuse
from blobsingleton._backends import current_backends, record_clock
from blobsingleton._blob_records import BlobRecordStore
from blobsingleton._busy import (
    Answer,
    Busy,
    BusyHandling,
    BusyPolicy,
    F,
    Guard,
    Wait,
    guarded,
    unguarded,
)
from blobsingleton._connection import (
    RECORD_CONTAINER,
    Storage,
    StorageAccount,
    container,
    from_settings,
    setting,
)
from blobsingleton._keys import Scope, function_scope, resolve_key
from blobsingleton._keys import namespace as resolve_namespace
from blobsingleton._once_handler import (
    DEFAULT_IN_PROGRESS_TIMEOUT,
    Mode,
    OnceHandler,
)
from blobsingleton._records import RecordStore, payload_hash
from blobsingleton._results import ResultCodec, Results
from blobsingleton._speed import SpeedLayer, speed_for
from blobsingleton._timer_policy import Timer, govern
from blobsingleton.errors import KeyTemplateError

log = logging.getLogger("blobsingleton")

#: How long a delivery that finds its key in progress is held, watching, before its policy.
DEFAULT_HOLD_BUSY = 3.0


def _seconds(value: float | timedelta) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


#: Where `@once` keeps its records: blobs of an account (`StorageAccount`, or a `Storage` with
#: its namespace; None: AzureWebJobsStorage), or any `RecordStore`.
Records = StorageAccount | Storage | RecordStore | None


# The return type follows the policies: under wait (or a callable's answer) and at-least-once,
# a call returns what the function returns or raises; skip, defer (a re-enqueued copy) and an
# at-most-once key whose run crashed return None.
@overload
def once(
    key: str, *, scope: Scope | None = ..., mode: Literal[Mode.AT_LEAST_ONCE] = ...,
    retention: float | timedelta = ..., in_progress_timeout: float | timedelta = ...,
    payload: Callable[..., Any] | None = ..., result: ResultCodec | None = ...,
    on_replay: Callable[[Any], Any] | None = ...,
    busy: Wait | Answer | Callable[[Exception], Any] = ..., schedule: str | Timer | None = ...,
    storage: Records = ..., run_without_key: bool = ...,
) -> _batch.OnceDecorator: ...  # fmt: skip
@overload
def once(
    key: str, *, scope: Scope | None = ..., mode: Mode = ..., retention: float | timedelta = ...,
    in_progress_timeout: float | timedelta = ..., payload: Callable[..., Any] | None = ...,
    result: ResultCodec | None = ..., on_replay: Callable[[Any], Any] | None = ...,
    busy: BusyPolicy = ..., schedule: str | Timer | None = ..., storage: Records = ...,
    run_without_key: bool = ...,
) -> _batch.MaybeSkippedOnce: ...  # fmt: skip
@_misuse.teaches_renames("once")
def once(
    key: str,
    *,
    scope: Scope | None = None,
    mode: Mode = Mode.AT_LEAST_ONCE,
    retention: float | timedelta = timedelta(days=7),
    in_progress_timeout: float | timedelta = DEFAULT_IN_PROGRESS_TIMEOUT,
    payload: Callable[..., Any] | None = None,
    result: ResultCodec | None = None,
    on_replay: Callable[[Any], Any] | None = None,
    busy: BusyPolicy = Busy.WAIT,
    schedule: str | Timer | None = None,
    storage: Records = None,
    run_without_key: bool = False,
) -> _batch.OnceDecorator | _batch.MaybeSkippedOnce:
    """Run the decorated function's work once per resolved `key` while its record lives: a
    completed key returns a fresh copy of the first call's result without running; a failed
    run frees the key.

    `scope`: the function's own records ("function", the default: two functions with one key
    template never share one) or the app's ("app"). `mode`: after a crash mid-run,
    AT_LEAST_ONCE reruns once the in-progress record expires (the work may run twice),
    AT_MOST_ONCE never does (it may stay undone). `in_progress_timeout` (15 s): a running
    call's heartbeat keeps its record alive, so this bounds how long a *crashed* call holds the
    key, not how long work may take. `retention` (7 days): how long a completed key is
    remembered. `payload(*args, **kwargs)`: what a duplicate must match, else `PayloadMismatch`
    (naming a mapping's differing fields). `result`: an `encode`/`decode` codec for results the
    default cannot store (see `blobsingleton.results`); an unstorable result raises
    `ResultNotStorable` at the first call, after its work ran. `on_replay(result)`: given a
    duplicate's copy, returns what the duplicate returns (each replay is also an `event=replay`
    record). `busy`: what a copy does while the key runs elsewhere, `Busy.wait(timeout=60,
    hold=3)` (then `AlreadyInProgress`), `Busy.skip()`, `Busy.defer(queue=...)` or a callable
    (`Busy`); each first holds `hold` s in its process, watching the record (3 s; 0 for skip).
    `run_without_key=True`: a key the invocation lacks (a missing or empty field) runs the
    function unguarded, with a warning, instead of raising `KeyTemplateError`. `schedule`: a
    timer's schedule, for `{occurrence}` keys, or a `timers.Timer` (with its catch-up and
    overlap policies). `storage`: where the records live, blobs of a
    `StorageAccount` or of a `Storage(account, namespace)` (default: AzureWebJobsStorage,
    `runonce`, namespace BLOBSINGLETON_NAMESPACE else the host id), or any `RecordStore` (which
    keeps the keys it is given: no `scope`). Inside a `@singleton` invocation, a record in
    progress written under that lease by an earlier holder is taken over at once (inferred
    from the lease held). Async functions never block the loop; cancelled, they free (or
    never claim) the key. Mistakes (an unknown busy policy, `Busy.DEFER` without its queue,
    `scope` with a `RecordStore`) raise when decorated.

    Typed as it behaves: under wait or a callable, at least once, a call returns what the
    function returns (or raises); with skip, defer or AT_MOST_ONCE it may return None.

    The decorated function gets `each(items, *args, **kwargs)` (`each_async` when async): its
    work once per item of a batch (a trigger with cardinality="many"), each item passed first
    (README, "Batches")."""
    if scope not in (None, "function", "app"):
        raise ValueError(f"@once(scope=...) must be 'function' or 'app', not {scope!r}")
    store, account, namespace = _records_at(storage, scope)
    timer = Timer.of(schedule)  # a timer's policies (issue 49): `_timer_policy`
    schedule_text = timer.schedule if timer else None
    handling = BusyHandling.of(busy, "once", storage=account)
    hold_s = handling.hold(DEFAULT_HOLD_BUSY)
    wait_timeout = handling.wait_timeout
    in_progress_s = _seconds(in_progress_timeout)
    retention_s = _seconds(retention)

    def decorate(fn: F) -> F:
        _misuse.check_target("once", [key], fn)
        signature = inspect.signature(fn)
        results = Results(fn.__qualname__, result)
        scope_id = None if scope == "app" else function_scope(fn)
        given = (store, speed_for(store)) if store is not None else None

        def make_guard(*args: Any, **kwargs: Any) -> Guard:
            try:
                resolved = resolve_key(key, signature, args, kwargs, schedule=schedule_text)
            except KeyTemplateError as error:
                hinted = _batch.list_hint(error, signature.bind_partial(*args, **kwargs).arguments)
                if not run_without_key:
                    if hinted is error:
                        raise
                    raise hinted from None
                log.warning("%s runs without run-once protection: %s", fn.__qualname__, hinted)
                return unguarded
            records, speed = given or _records_for(account, namespace, scope_id)
            return OnceHandler(
                records,
                resolved,
                payload=payload_hash(payload(*args, **kwargs)) if payload else None,
                mode=mode,
                in_progress_timeout=in_progress_s,
                retention=retention_s,
                results=results,
                on_replay=on_replay,
                wait_timeout=wait_timeout,
                hold=hold_s,
                clock=record_clock(),
                speed=speed,
            )

        def batch() -> _batch.BatchSpec:  # built when `each` is called: no batch code before
            return _batch.BatchSpec(
                fn, make_guard, handling, ("once", key),
                lambda *a, **k: signature.bind(*a, **k).arguments, hold=hold_s,
                wait_timeout=wait_timeout,
            )  # fmt: skip

        wrapper = _with_each(guarded(fn, make_guard, handling, ("once", key)), fn, batch)
        if timer is None:
            return wrapper
        return govern(  # type: ignore[return-value]
            wrapper, fn, key, timer, retention_s, storage=account, namespace=namespace,
            records=lambda: store or _records_for(account, namespace, scope_id)[0],
        )  # fmt: skip

    return decorate  # type: ignore[return-value]  # OnceDecorator: guarded's, with `each`


def _with_each(wrapper: F, fn: F, batch: Callable[[], _batch.BatchSpec]) -> F:
    """`wrapper` (an `@once` function) with `each`, or `each_async` when it is async."""
    if inspect.iscoroutinefunction(fn):

        async def run_each_async(items: Iterable[Any], /, *args: Any, **kwargs: Any) -> Any:
            return await _batch.each_async(batch(), items, args, kwargs)

        wrapper.each_async = run_each_async  # type: ignore[attr-defined]
        wrapper.each = _misuse.async_each(fn)  # type: ignore[attr-defined]
    else:

        def run_each(items: Iterable[Any], /, *args: Any, **kwargs: Any) -> Any:
            return _batch.each(batch(), items, args, kwargs)

        wrapper.each = run_each  # type: ignore[attr-defined]
    return wrapper


def _records_at(
    storage: Records, scope: Scope | None
) -> tuple[RecordStore | None, StorageAccount | None, str | None]:
    """`storage=` of `@once`: a store given, or the account and namespace of the blobs (each a
    default when None); what cannot apply is refused."""
    if isinstance(storage, Storage):
        if storage.container is not None:
            raise ValueError(
                "@once(storage=Storage(container=...)): records live in the account's runonce "
                "container (RUNONCE_CONTAINER); for another container pass "
                "storage=BlobRecordStore(container, namespace=...)"
            )
        return None, storage.account, storage.namespace
    if storage is None or isinstance(storage, StorageAccount):
        return None, storage, None
    if not isinstance(storage, RecordStore):
        raise TypeError(
            "@once(storage=...) takes a StorageAccount, a Storage(account, namespace) or a "
            f"RecordStore, not {storage!r}"
        )
    if scope is not None:
        raise ValueError(
            f"@once(scope={scope!r}, storage=<a RecordStore>): a store of your own keeps the keys "
            "it is given; scope names blobs of a storage account. Leave scope out (give two "
            "functions that must not share keys a store each)"
        )
    return storage, None, None


#: Stores built here, each with the account it was built for (an id is reused once freed).
_stores: dict[tuple[Any, ...], tuple[StorageAccount, RecordStore, SpeedLayer | None]] = {}


def _records_for(
    storage: StorageAccount | None, namespace: str | None, scope: str | None
) -> tuple[RecordStore, SpeedLayer | None]:
    """The record store a `@once` given no `RecordStore` uses, and its speed layer: a
    `BlobRecordStore`, one per account, container, namespace and scope (its clients and
    watcher are kept), or the test backends' store."""
    backends = current_backends()
    if backends is not None:
        store = backends.record_store(storage=storage, namespace=namespace, scope=scope)
        return store, speed_for(store)
    account = storage or from_settings()
    name = setting(RECORD_CONTAINER[0]) or RECORD_CONTAINER[1]
    ident = (id(account), name, resolve_namespace(namespace), scope)
    found = _stores.get(ident)
    if found is None or found[0] is not account:
        if len(_stores) > 1000:
            _stores.clear()
        store = BlobRecordStore(
            container(None, RECORD_CONTAINER, account), namespace=ident[2], scope=scope
        )
        found = _stores[ident] = (account, store, speed_for(store))
    return found[1], found[2]
