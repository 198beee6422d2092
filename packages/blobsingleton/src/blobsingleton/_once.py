"""`@once(key)`: run a function's work once per key, however many deliveries arrive.

    @once("email-{notification.event_id}", payload=lambda n: n.to_dict(),
          on_in_progress=Busy.DEFER, queue="%NOTIFICATIONS_QUEUE%")
    def deliver(notification: Notification) -> dict: ...

A completed key returns its stored (JSON) result without running; an exception frees the
key so the host's retry runs it again.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import logging
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, TypeVar

from blobsingleton import _defaults
from blobsingleton._busy import (
    RUN,
    Admission,
    Busy,
    BusyHandling,
    BusyPolicy,
    Guard,
    MaybeSkipped,
    check_policy,
    guarded,
)
from blobsingleton._connection import StorageAccount
from blobsingleton._once_handler import (
    DEFAULT_IN_PROGRESS_TIMEOUT,
    Decision,
    Mode,
    OnceHandler,
    Outcome,
    payload_hash,
)
from blobsingleton._records import RecordStore
from blobsingleton._templates import resolve_key
from blobsingleton.errors import OutsideGuardedCall

log = logging.getLogger("blobsingleton")

F = TypeVar("F", bound=Callable[..., Any])

#: How long a delivery that finds its key in progress is held, watching, before its policy.
DEFAULT_HOLD_BUSY = 3.0

_current: contextvars.ContextVar[OnceHandler | None] = contextvars.ContextVar(
    "once_run", default=None
)


def current_run() -> OnceHandler:
    """The run the executing `@once` invocation owns: its `key`, `attempt` and `ensure_held()`.

    Call `current_run().ensure_held()` before a side effect that must not happen twice: it
    raises `RunLost` once another delivery took the key over (or may have).
    """
    handler = _current.get()
    if handler is None:
        raise OutsideGuardedCall("current_run()", "@once")
    return handler


def _seconds(value: float | timedelta) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


class _RecordGuard(Guard):
    """One invocation's run-once record: claimed before the body, completed or freed after."""

    def __init__(
        self, handler: OnceHandler, function: str, wait_timeout: float, hold: float
    ) -> None:
        self.handler = handler
        self.function = function
        self.wait_timeout = wait_timeout
        self.hold = hold

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
        if outcome.decision == Decision.STORED:
            log.info(
                "%s: %s already done, returning its stored result", self.function, self.handler.key
            )
            return Admission(run=False, result=outcome.record.result)
        if outcome.decision == Decision.ABANDONED:
            return Admission(run=False)
        return Admission(
            run=False,
            busy=self.handler.busy_error(outcome.record),
            retry_after=self.handler.retry_after(outcome.record),
        )

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        token = _current.set(self.handler)
        try:
            yield
        finally:
            _current.reset(token)

    def settle(self, result: Any, failed: bool) -> None:
        if failed:
            self.handler.fail()
        else:
            self.handler.complete(result)


def once(
    key: str,
    *,
    mode: Mode = Mode.AT_LEAST_ONCE,
    retention: float | timedelta = timedelta(days=7),
    in_progress_timeout: float | timedelta = DEFAULT_IN_PROGRESS_TIMEOUT,
    payload: Callable[..., Any] | None = None,
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
) -> MaybeSkipped:
    """Run the decorated function's work once per resolved `key` while its record lives.

    A completed key returns its stored result without running; a failed run frees the key.
    `mode`: after a crash mid-run, AT_LEAST_ONCE (default) reruns once the in-progress record
    expires, so the work may run twice across a crash; AT_MOST_ONCE never reruns it, so a
    crash may leave it undone. `in_progress_timeout` (default 15 s): a running call keeps its
    record alive with a heartbeat, so this bounds how long a *crashed* call holds the key, not
    how long the work may take.
    `retention`: how long a completed key is remembered (default 7 days).
    `payload(*args, **kwargs)`: what must match for a duplicate; a different one raises
    `PayloadMismatch`. `on_in_progress`: WAIT (poll up to `wait_timeout`, then
    `AlreadyInProgress`), SKIP, DEFER (re-enqueue on `queue`, visible again when the record
    could next change: its expiry, unless `defer_seconds` says otherwise), or a callable.
    Async functions never block the loop; cancelled, they free (or never claim) the key.
    `namespace`: whose keys these are (default: app setting BLOBSINGLETON_NAMESPACE, else the
    Functions host id), so two apps on one storage account each run their own work.
    `under_lease=True`: the function runs inside a `@singleton` whose lease covers this key, so
    whoever gets here holds the lease and a record still in progress belongs to a run that
    lost it (crashed, or paused past its lease and fenced off): it is taken over at once, with
    no heartbeat and no in-progress timeout to wait out.
    `hold_busy`: seconds a delivery that finds its key in progress stays in its process,
    watching the record, before `on_in_progress` applies (default `DEFAULT_HOLD_BUSY`, 3 s,
    for DEFER, WAIT and callables; 0 for SKIP). It learns the run it waits for finished about
    when that run does (the watcher checks every waiting key of the process with one request
    per tick, paced by how long runs take here) and returns its stored result; a run still
    going after the hold is re-queued for when its record could expire, as before.
    """
    check_policy(on_in_progress, queue)
    if hold_busy is None:
        hold_busy = 0.0 if on_in_progress == Busy.SKIP else DEFAULT_HOLD_BUSY
    if hold_busy < 0:
        raise ValueError(f"hold_busy must be at least 0 seconds, not {hold_busy!r}")
    hold_s = min(hold_busy, wait_timeout) if on_in_progress == Busy.WAIT else hold_busy
    in_progress_s, retention_s = _seconds(in_progress_timeout), _seconds(retention)
    if under_lease:
        in_progress_s = 0.0  # the lease is the liveness signal
    busy = BusyHandling(on_in_progress, queue, defer_seconds, storage)

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn)

        def make_guard(*args: Any, **kwargs: Any) -> _RecordGuard:
            handler = OnceHandler(
                store or _defaults.record_store(storage=storage, namespace=namespace),
                resolve_key(key, signature, args, kwargs, schedule=schedule),
                payload=payload_hash(payload(*args, **kwargs)) if payload else None,
                mode=mode,
                in_progress_timeout=in_progress_s,
                retention=retention_s,
                under_lease=under_lease,
            )
            return _RecordGuard(handler, fn.__name__, wait_timeout, hold_s)

        return guarded(fn, make_guard, busy)

    return decorate
