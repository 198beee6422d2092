"""`@once(key)`: run a function's work once per key, however many deliveries arrive.

    @once("email-{notification.event_id}", payload=lambda n, msg: n.fingerprint(),
          on_in_progress=Busy.DEFER, queue="%NOTIFICATIONS_QUEUE%")
    def deliver(notification: Notification, msg: func.QueueMessage) -> dict: ...

A completed key returns its stored (JSON) result without running; an exception frees the
key so the host's retry runs it again.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from blobsingleton import _deferral as deferral
from blobsingleton._blob_records import BlobRecordStore
from blobsingleton._busy import Busy, BusyPolicy, check_policy
from blobsingleton._connection import StorageAccount
from blobsingleton._invocation import entry_point, invocation_scope, to_thread
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

log = logging.getLogger("blobsingleton")

F = TypeVar("F", bound=Callable[..., Any])


def _seconds(value: float | timedelta) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


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
) -> Callable[[F], F]:
    """Run the decorated function at most once per resolved `key` while its record lives.

    `mode`: after a crash mid-run, AT_LEAST_ONCE (default) reruns once the in-progress record
    expires; AT_MOST_ONCE never reruns it. `in_progress_timeout` (default 15 s): a running
    call keeps its record alive with a heartbeat, so this bounds how long a *crashed* call
    holds the key, not how long the work may take.
    `retention`: how long a completed key is remembered (default 7 days).
    `payload(*args, **kwargs)`: what must match for a duplicate; a different one raises
    `PayloadMismatch`. `on_in_progress`: WAIT (poll up to `wait_timeout`, then
    `AlreadyInProgress`), SKIP, DEFER (re-enqueue on `queue`, visible again when the record
    could next change: its expiry, unless `defer_seconds` says otherwise), or a callable.
    """
    check_policy(on_in_progress, queue)
    in_progress_s, retention_s = _seconds(in_progress_timeout), _seconds(retention)

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn)

        def handler_for(args: tuple[Any, ...], kwargs: dict[str, Any]) -> OnceHandler:
            return OnceHandler(
                store or BlobRecordStore(storage=storage),
                resolve_key(key, signature, args, kwargs, schedule=schedule),
                payload=payload_hash(payload(*args, **kwargs)) if payload else None,
                mode=mode,
                in_progress_timeout=in_progress_s,
                retention=retention_s,
            )

        def begin(handler: OnceHandler) -> Outcome:
            if on_in_progress == Busy.WAIT:
                return handler.wait(wait_timeout)
            return handler.begin()

        def not_executed(
            handler: OnceHandler, outcome: Outcome, args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> Any:
            if outcome.decision == Decision.STORED:
                log.info(
                    "%s: %s already done, returning its stored result", fn.__name__, handler.key
                )
                return outcome.record.result
            if outcome.decision == Decision.ABANDONED:
                return None
            error = handler.busy_error(outcome.record)
            if on_in_progress == Busy.WAIT:
                raise error
            if on_in_progress == Busy.SKIP:
                log.info("%s skipped: %s", fn.__name__, error)
                return None
            if on_in_progress == Busy.DEFER:
                message = deferral.find_message(signature.bind(*args, **kwargs).arguments)
                delay = (
                    handler.retry_after(outcome.record) if defer_seconds is None else defer_seconds
                )
                deferral.defer(message, queue or "", delay, reason=str(error), storage=storage)
                return None
            return on_in_progress(error)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                with invocation_scope(kwargs):
                    handler = handler_for(args, kwargs)
                    outcome = await to_thread(begin, handler)
                    if outcome.decision != Decision.EXECUTE:
                        return await to_thread(not_executed, handler, outcome, args, kwargs)
                    try:
                        result = await fn(*args, **kwargs)
                    except BaseException:
                        await to_thread(handler.fail)
                        raise
                    await to_thread(handler.complete, result)
                    return result

            return entry_point(run_async, fn)  # type: ignore[return-value]

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with invocation_scope(kwargs):
                handler = handler_for(args, kwargs)
                outcome = begin(handler)
                if outcome.decision != Decision.EXECUTE:
                    return not_executed(handler, outcome, args, kwargs)
                try:
                    result = fn(*args, **kwargs)
                except BaseException:
                    handler.fail()
                    raise
                handler.complete(result)
                return result

        return entry_point(run, fn)  # type: ignore[return-value]

    return decorate
