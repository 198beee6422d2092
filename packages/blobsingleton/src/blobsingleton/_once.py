"""`@once(key)`: run a function's work once per key (docs/internals.md)."""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal, overload

from blobsingleton import _batch, _defaults
from blobsingleton._busy import (
    RUN,
    Admission,
    Busy,
    BusyHandling,
    BusyPolicy,
    F,
    Guard,
    guarded,
    unguarded,
)
from blobsingleton._connection import StorageAccount
from blobsingleton._keys import Scope, function_scope, resolve_key
from blobsingleton._once_handler import (
    DEFAULT_IN_PROGRESS_TIMEOUT,
    Decision,
    Mode,
    OnceHandler,
    Outcome,
)
from blobsingleton._records import RecordStore, payload_hash
from blobsingleton._results import ResultCodec, Results
from blobsingleton._telemetry import emit
from blobsingleton.errors import KeyTemplateError, OutsideGuardedCall

log = logging.getLogger("blobsingleton")

#: How long a delivery that finds its key in progress is held, watching, before its policy.
DEFAULT_HOLD_BUSY = 3.0

_current: contextvars.ContextVar[OnceHandler | None] = contextvars.ContextVar(
    "once_run", default=None
)


def current_run() -> OnceHandler:
    """The run the executing `@once` invocation owns: its `key`, `attempt` (1, or more after
    takeovers of crashed runs), `token` (of the `@singleton` lease it runs under, else None)
    and `ensure_held()`, to call before a side effect that must not happen twice: it raises
    `RunLost` once another delivery took the key over (or may have)."""
    handler = _current.get()
    if handler is None:
        raise OutsideGuardedCall("current_run()", "@once")
    return handler


def _seconds(value: float | timedelta) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


@dataclass
class _RecordGuard(Guard):
    """One invocation's run-once record: claimed before the body, completed or freed after."""

    handler: OnceHandler
    results: Results
    on_replay: Callable[[Any], Any] | None
    wait_timeout: float
    hold: float

    def enter(self, wait: bool) -> Admission:
        handler = self.handler
        if wait:
            return self._admission(handler.wait(self.wait_timeout, hold=self.hold))
        return self._admission(handler.hold(handler.begin(), self.hold))

    async def enter_async(self, wait: bool) -> Admission:
        timeout = self.wait_timeout if wait else 0.0
        outcome = await self.handler.begin_async(timeout, hold=self.hold)
        return self._admission(outcome)

    def _admission(self, outcome: Outcome) -> Admission:
        if outcome.decision == Decision.EXECUTE:
            return RUN
        key, record = self.handler.key, outcome.record
        if outcome.decision == Decision.STORED:
            emit("replay", key=key, function=self.results.function, attempt=record.attempt)
            result = self.results.replay(key, record.result)
            replayed = self.on_replay(result) if self.on_replay else result
            return Admission(run=False, result=replayed, outcome="replayed")
        if outcome.decision == Decision.ABANDONED:
            return Admission(run=False)
        busy = self.handler.busy_error(record)
        return Admission(run=False, busy=busy, retry_after=self.handler.retry_after(record))

    def describe(self) -> dict[str, Any]:
        handler = self.handler
        return {"key": handler.key, "attempt": handler.attempt or None, "token": handler.token}

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        # A claim known as ours only after its record could expire (a create answered 500 after
        # it landed, retried seconds later) runs nothing: RunLost, and the host retries.
        self.handler.ensure_held()
        token = _current.set(self.handler)
        try:
            yield
        finally:
            _current.reset(token)

    def settle(self, result: Any, failed: bool) -> None:
        if failed:
            self.handler.fail()
            return
        stored, refused = self.results.store(self.handler.key, result)
        self.handler.complete(stored)
        if refused is not None:
            raise refused


# The return type follows the policies: under WAIT (or a callable's answer) and at-least-once,
# a call returns what the function returns or raises; SKIP, DEFER (a re-enqueued copy) and an
# at-most-once key whose run crashed return None.
@overload
def once(
    key: str, *, scope: Scope = ..., mode: Literal[Mode.AT_LEAST_ONCE] = ...,
    retention: float | timedelta = ..., in_progress_timeout: float | timedelta = ...,
    payload: Callable[..., Any] | None = ..., result: ResultCodec | None = ...,
    on_replay: Callable[[Any], Any] | None = ...,
    on_in_progress: Literal[Busy.WAIT] | Callable[[Exception], Any] = ...,
    wait_timeout: float = ..., queue: str | None = ..., defer_seconds: float | None = ...,
    schedule: str | None = ..., store: RecordStore | None = ...,
    storage: StorageAccount | None = ..., namespace: str | None = ..., under_lease: bool = ...,
    hold_busy: float | None = ..., run_without_key: bool = ...,
) -> _batch.OnceDecorator: ...  # fmt: skip
@overload
def once(
    key: str, *, scope: Scope = ..., mode: Mode = ..., retention: float | timedelta = ...,
    in_progress_timeout: float | timedelta = ..., payload: Callable[..., Any] | None = ...,
    result: ResultCodec | None = ..., on_replay: Callable[[Any], Any] | None = ...,
    on_in_progress: BusyPolicy = ..., wait_timeout: float = ..., queue: str | None = ...,
    defer_seconds: float | None = ..., schedule: str | None = ...,
    store: RecordStore | None = ..., storage: StorageAccount | None = ...,
    namespace: str | None = ..., under_lease: bool = ..., hold_busy: float | None = ...,
    run_without_key: bool = ...,
) -> _batch.MaybeSkippedOnce: ...  # fmt: skip
def once(
    key: str,
    *,
    scope: Scope = "function",
    mode: Mode = Mode.AT_LEAST_ONCE,
    retention: float | timedelta = timedelta(days=7),
    in_progress_timeout: float | timedelta = DEFAULT_IN_PROGRESS_TIMEOUT,
    payload: Callable[..., Any] | None = None,
    result: ResultCodec | None = None,
    on_replay: Callable[[Any], Any] | None = None,
    on_in_progress: BusyPolicy = Busy.WAIT,
    wait_timeout: float = 60.0,
    queue: str | None = None,
    defer_seconds: float | None = None,
    schedule: str | None = None,
    store: RecordStore | None = None,
    storage: StorageAccount | None = None,
    namespace: str | None = None,
    under_lease: bool = False,
    hold_busy: float | None = None,
    run_without_key: bool = False,
) -> _batch.OnceDecorator | _batch.MaybeSkippedOnce:
    """Run the decorated function's work once per resolved `key` while its record lives: a
    completed key returns a fresh copy of the first call's result without running; a failed
    run frees the key.

    `scope`: the function's own records ("function": two functions with one key template never
    share one) or the app's ("app"). `mode`: after a crash mid-run, AT_LEAST_ONCE reruns once
    the in-progress record expires (the work may run twice), AT_MOST_ONCE never does (it may
    stay undone). `in_progress_timeout` (15 s): a running call's heartbeat keeps its record
    alive, so this bounds how long a *crashed* call holds the key, not how long work may take.
    `retention` (7 days): how long a completed key is remembered. `payload(*args, **kwargs)`:
    what a duplicate must match, else `PayloadMismatch` (naming a mapping's differing fields).
    `result`: an `encode`/`decode` codec for results the default cannot store (see
    `blobsingleton.results`); an unstorable result raises `ResultNotStorable` at the first
    call, after its work ran. `on_replay(result)`: given a duplicate's copy, returns what the
    duplicate returns (each replay is also an `event=replay` record).
    `on_in_progress`: WAIT (up to `wait_timeout` s, then `AlreadyInProgress`), SKIP, DEFER
    (re-enqueue on `queue`, visible when the record could next change or after
    `defer_seconds`), or a callable. `hold_busy`: seconds a delivery that finds its key in
    progress watches the record in its process before that applies (3 s; 0 for SKIP).
    `run_without_key=True`: a key the invocation lacks (a missing or empty field) runs the
    function unguarded, with a warning, instead of raising `KeyTemplateError`. `schedule`: a
    timer's schedule, for `{occurrence}` keys. `store`: any `RecordStore`; else records are
    blobs of `storage` (default: AzureWebJobsStorage, `runonce`) in `namespace` (default: app
    setting BLOBSINGLETON_NAMESPACE, else the host id). Inside a `@singleton` invocation, a record
    in progress written under that lease by an earlier holder is taken over at once
    (`under_lease` is inferred; the argument is ignored). Async functions never block
    the loop; cancelled, they free (or never claim) the key.

    Typed as it behaves: under WAIT or a callable, at least once, a call returns what the
    function returns (or raises); with SKIP, DEFER or AT_MOST_ONCE it may return None.

    The decorated function gets `each(items, *args, **kwargs)` (`each_async` when async): its
    work once per item of a batch (a trigger with cardinality="many"), each item passed first
    (README, "Batches")."""
    if scope not in ("function", "app"):
        raise ValueError(f"scope must be 'function' or 'app', not {scope!r}")
    if hold_busy is None:
        hold_busy = 0.0 if on_in_progress == Busy.SKIP else DEFAULT_HOLD_BUSY
    if hold_busy < 0:
        raise ValueError(f"hold_busy must be at least 0 seconds, not {hold_busy!r}")
    hold_s = min(hold_busy, wait_timeout) if on_in_progress == Busy.WAIT else hold_busy
    in_progress_s = _seconds(in_progress_timeout)
    retention_s = _seconds(retention)
    busy = BusyHandling(on_in_progress, queue, defer_seconds, storage)

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn)
        results = Results(fn.__qualname__, result)
        scope_id = function_scope(fn) if scope == "function" else None

        def make_guard(*args: Any, **kwargs: Any) -> Guard:
            try:
                resolved = resolve_key(key, signature, args, kwargs, schedule=schedule)
            except KeyTemplateError as error:
                hinted = _batch.list_hint(error, signature.bind_partial(*args, **kwargs).arguments)
                if not run_without_key:
                    if hinted is error:
                        raise
                    raise hinted from None
                log.warning("%s runs without run-once protection: %s", fn.__qualname__, hinted)
                return unguarded
            handler = OnceHandler(
                store
                or _defaults.record_store(storage=storage, namespace=namespace, scope=scope_id),
                resolved,
                payload=payload_hash(payload(*args, **kwargs)) if payload else None,
                mode=mode,
                in_progress_timeout=in_progress_s,
                retention=retention_s,
            )
            return _RecordGuard(handler, results, on_replay, wait_timeout, hold_s)

        wrapper = guarded(fn, make_guard, busy, ("once", key))
        spec = _batch.BatchSpec(
            fn, make_guard, busy, ("once", key), lambda *a, **k: signature.bind(*a, **k).arguments,
            hold=hold_s, wait_timeout=wait_timeout,
        )  # fmt: skip
        return _batch.with_each(wrapper, spec)

    return decorate  # type: ignore[return-value]  # OnceDecorator: guarded's, with `each`
