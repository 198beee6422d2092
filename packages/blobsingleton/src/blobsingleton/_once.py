"""`@once(key)`: run a function's work once per key; and what a duplicate gets back, the first
call's result rebuilt fresh (`Results`, its codec) (docs/internals.md)."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import enum
import importlib
import inspect
import logging
import math
import uuid
from collections.abc import Callable, Iterable
from datetime import timedelta
from decimal import Decimal
from typing import Any, Literal, Protocol, overload

from blobsingleton import _batch, _misuse
from blobsingleton._backends import current_backends
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
from blobsingleton._timer_policy import Timer, govern, record_clock
from blobsingleton.errors import KeyTemplateError, ResultNotStorable

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
            return OnceHandler(
                store or record_store(storage=account, namespace=namespace, scope=scope_id),
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
            records=lambda: store or record_store(storage=account, namespace=namespace,
                                                  scope=scope_id),
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
_stores: dict[tuple[Any, ...], tuple[StorageAccount, RecordStore]] = {}


def record_store(
    *, storage: StorageAccount | None = None, namespace: str | None = None,
    scope: str | None = None,
) -> RecordStore:  # fmt: skip
    """The record store a `@once` without `store=` uses: a `BlobRecordStore`, one per account,
    container, namespace and scope (its clients and watcher are kept)."""
    backends = current_backends()
    if backends is not None:
        return backends.record_store(storage=storage, namespace=namespace, scope=scope)
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
        found = _stores[ident] = (account, store)
    return found[1]


# What a duplicate gets back: the first call's result, rebuilt fresh (`Results`, its codec).

TAG = "$t"
_SCALARS = (str, int, bool, type(None))  # exact types (see `encode`)
_TIMES: dict[str, type] = {"datetime": dt.datetime, "date": dt.date, "time": dt.time}
#: Rebuilds one tagged value; its parts through the second argument (the codec's `decode`).
_Decoder = Callable[[dict[str, Any], Callable[[Any], Any]], Any]


class ResultCodec(Protocol):
    """A `@once(result=...)` codec: `encode` gives JSON-able data, `decode` the value back."""

    def encode(self, result: Any) -> Any: ...

    def decode(self, data: Any) -> Any: ...


class Unstorable(Exception):
    """Internal: a value the default codec cannot store (its type is `kind`)."""

    def __init__(self, kind: type) -> None:
        super().__init__(kind.__qualname__)
        self.kind = kind


def _class_path(cls: type) -> str:
    if "<locals>" in cls.__qualname__:
        raise Unstorable(cls)  # cannot be imported again
    return f"{cls.__module__}:{cls.__qualname__}"


def _import(path: str) -> Any:
    module, _, qualname = path.partition(":")
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def _http_response_class() -> Any:
    try:
        return importlib.import_module("azure.functions").HttpResponse
    except ImportError:  # pragma: no cover - the worker's SDK is not installed
        return None


def encode(value: Any, part: Callable[[Any], Any]) -> Any:
    """`value` as JSON-able data, its parts through `part` (the codec's own `encode`, so a
    subclass's types are found nested too); `Unstorable` for a type this codec cannot store
    (types are matched exactly: a subclass of str, dict or list would come back as its base)."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if isinstance(value, enum.Enum):
        return {TAG: "enum", "cls": _class_path(kind), "v": part(value.value)}
    if kind is float:
        return value if math.isfinite(value) else {TAG: "float", "v": repr(value)}
    if kind is list:
        return [part(item) for item in value]
    if kind is dict:
        if all(type(k) is str for k in value) and TAG not in value:
            return {k: part(v) for k, v in value.items()}
        return {TAG: "dict", "v": [[part(k), part(v)] for k, v in value.items()]}
    if isinstance(value, tuple) and hasattr(kind, "_fields"):
        return {TAG: "namedtuple", "cls": _class_path(kind), "v": [part(i) for i in value]}
    for tag, exact in (("tuple", tuple), ("frozenset", frozenset), ("set", set)):
        if kind is exact:
            return {TAG: tag, "v": [part(item) for item in value]}
    if kind is Decimal:
        return {TAG: "decimal", "v": str(value)}
    for tag, time_kind in _TIMES.items():
        if kind is time_kind:
            return {TAG: tag, "v": value.isoformat()}
    if kind is dt.timedelta:
        return {TAG: "timedelta", "v": [value.days, value.seconds, value.microseconds]}
    if kind is uuid.UUID:
        return {TAG: "uuid", "v": str(value)}
    if kind in (bytes, bytearray):
        return {TAG: kind.__name__, "v": base64.b64encode(value).decode("ascii")}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: part(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {TAG: "dataclass", "cls": _class_path(type(value)), "v": fields}
    if callable(getattr(value, "model_dump", None)) and hasattr(type(value), "model_validate"):
        dumped = value.model_dump(mode="json")
        return {TAG: "model", "cls": _class_path(type(value)), "v": dumped}
    response = _http_response_class()
    if response is not None and isinstance(value, response):
        return {
            TAG: "http",
            "status": value.status_code,
            "headers": [[k, v] for k, v in value.headers.items()],
            "mimetype": value.mimetype,
            "charset": value.charset,
            "body": base64.b64encode(value.get_body()).decode("ascii"),
        }
    raise Unstorable(type(value))


def decode(data: Any, part: Callable[[Any], Any]) -> Any:
    """New objects from what `encode` stored, its parts through `part` (as for `encode`)."""
    if isinstance(data, list):
        return [part(item) for item in data]
    if not isinstance(data, dict):
        return data
    tag = data.get(TAG)
    if tag is None:
        return {k: part(v) for k, v in data.items()}
    return _DECODERS[tag](data, part)


def _dataclass(data: dict[str, Any], part: Callable[[Any], Any]) -> Any:
    cls: Any = _import(data["cls"])
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"{data['cls']} is no longer a dataclass")
    values = {name: part(value) for name, value in data["v"].items()}
    fields = {f.name: f for f in dataclasses.fields(cls)}
    make: Callable[..., Any] = cls
    instance = make(**{n: v for n, v in values.items() if fields[n].init})
    for name, value in values.items():
        if not fields[name].init:
            object.__setattr__(instance, name, value)
    return instance


def _http(data: dict[str, Any], _: Callable[[Any], Any]) -> Any:
    response_class = _http_response_class()
    if response_class is None:  # pragma: no cover
        raise TypeError("an HttpResponse result needs azure-functions installed")
    response = response_class(
        base64.b64decode(data["body"]), status_code=data["status"],
        mimetype=data["mimetype"], charset=data["charset"],
    )  # fmt: skip
    for name, value in data["headers"]:
        response.headers.add_header(name, value)
    return response


def _from_iso(kind: Any) -> _Decoder:
    return lambda data, _: kind.fromisoformat(data["v"])


_DECODERS: dict[str, _Decoder] = {
    "float": lambda d, part: float(d["v"]),
    "dict": lambda d, part: {part(k): part(v) for k, v in d["v"]},
    "enum": lambda d, part: _import(d["cls"])(part(d["v"])),
    "tuple": lambda d, part: tuple(part(item) for item in d["v"]),
    "namedtuple": lambda d, part: _import(d["cls"])(*(part(item) for item in d["v"])),
    "set": lambda d, part: {part(item) for item in d["v"]},
    "frozenset": lambda d, part: frozenset(part(item) for item in d["v"]),
    "decimal": lambda d, part: Decimal(d["v"]),
    "timedelta": lambda d, part: dt.timedelta(*d["v"]),
    "uuid": lambda d, part: uuid.UUID(d["v"]),
    "bytes": lambda d, part: base64.b64decode(d["v"]),
    "bytearray": lambda d, part: bytearray(base64.b64decode(d["v"])),
    "dataclass": _dataclass,
    "model": lambda d, part: _import(d["cls"]).model_validate(d["v"]),
    "http": _http,
    "ledger": lambda d, part: None,  # a timer's occurrence no run wrote (missed, skipped)
    **{tag: _from_iso(kind) for tag, kind in _TIMES.items()},
}


class DefaultCodec:
    """The codec `@once` uses unless given one (see `blobsingleton.results`). A subclass that
    adds a type overrides both methods and calls `super()` for the rest: nested values come
    back through its own methods."""

    def encode(self, result: Any) -> Any:
        return encode(result, self.encode)

    def decode(self, data: Any) -> Any:
        return decode(data, self.decode)


#: What a completion stores when its result could not be stored: duplicates raise.
UNSTORED = "unstored"


class Results:
    """One decorated function's results: `store` at completion, `replay` for a duplicate."""

    def __init__(self, function: str, codec: ResultCodec | None) -> None:
        self.function = function
        self.codec: ResultCodec = codec or DefaultCodec()

    def store(self, key: str, result: Any) -> tuple[Any, ResultNotStorable | None]:
        """The stored form of `result`, or a marker and the error the first call raises."""
        try:
            return self.codec.encode(result), None
        except Unstorable as error:
            kind = error.kind.__qualname__
        except (TypeError, ValueError) as error:  # a codec of the user's own
            kind = f"{type(result).__qualname__} ({error})"
        refused = ResultNotStorable(key, self.function, kind)
        return {TAG: UNSTORED, "type": kind}, refused

    def replay(self, key: str, stored: Any) -> Any:
        """A fresh copy of the first call's result; `ResultNotStorable` if it was not stored."""
        if isinstance(stored, dict) and stored.get(TAG) == UNSTORED:
            raise ResultNotStorable(key, self.function, str(stored.get("type")))
        return self.codec.decode(stored)
