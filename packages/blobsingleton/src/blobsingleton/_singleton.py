"""`@singleton`: WebJobs' `[Singleton]` for Python v2 functions, on blob leases.

    @bp.queue_trigger(arg_name="msg", queue_name="%IMPORT_QUEUE%", connection="AzureWebJobsStorage")
    @singleton("import-{account}", on_busy=Busy.DEFER, queue="%IMPORT_QUEUE%")
    def import_account(msg: func.QueueMessage) -> None:
        lease = current_lease()          # token for fenced writes, ensure_held() before effects

Goes under the trigger decorator (innermost). The wrapper keeps the signature and the
coroutine-ness the Python worker inspects when it indexes the function.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from blobsingleton import _deferral as deferral
from blobsingleton._blob_lease import BlobLease
from blobsingleton._busy import Busy, BusyPolicy, check_policy
from blobsingleton._connection import StorageAccount
from blobsingleton._events import emit
from blobsingleton._invocation import entry_point, invocation_scope
from blobsingleton._lease import DEFAULT_PERIOD
from blobsingleton._owner import Owner
from blobsingleton._templates import resolve_key
from blobsingleton.errors import LeaseLost, LeaseTimeout

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient

log = logging.getLogger("blobsingleton")

F = TypeVar("F", bound=Callable[..., Any])

_current: contextvars.ContextVar[BlobLease | None] = contextvars.ContextVar(
    "singleton_lease", default=None
)


def current_lease() -> BlobLease:
    """The lease the running `@singleton` invocation holds (its token, `ensure_held()`)."""
    lease = _current.get()
    if lease is None:
        raise LookupError("current_lease() called outside a @singleton function")
    return lease


def singleton(
    scope: str,
    *,
    on_busy: BusyPolicy = Busy.WAIT,
    wait_timeout: float = 60.0,
    period: float = DEFAULT_PERIOD,
    queue: str | None = None,
    defer_seconds: float | None = None,
    schedule: str | None = None,
    container: ContainerClient | None = None,
    storage: StorageAccount | None = None,
    fair: bool | None = None,
) -> Callable[[F], F]:
    """Run the function only while holding the lease named by `scope` (a key template).

    `on_busy`: `Busy.WAIT` (default, up to `wait_timeout` s, then `LeaseTimeout` so the host
    retries), `Busy.SKIP`, `Busy.DEFER` (needs `queue`; delay `defer_seconds`, default one
    lease period), or a callable returning the result to give instead (e.g. a 409).
    A lease lost mid-run is logged and raised as `LeaseLost` after the function returns.
    `fair` (default: True under `Busy.WAIT`): waiters wait in line and get the key in arrival
    order; costs one request more per invocation (the releaser looks at the line).
    """
    check_policy(on_busy, queue)
    in_line = on_busy == Busy.WAIT if fair is None else fair

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn)

        def prepare(args: tuple[Any, ...], kwargs: dict[str, Any]) -> BlobLease:
            key = resolve_key(scope, signature, args, kwargs, schedule=schedule)
            owner = Owner(function=fn.__name__, invocation_id=_invocation_id(kwargs))
            return BlobLease(
                key, period=period, container=container, storage=storage, owner=owner,
                fair=in_line,
            )  # fmt: skip

        def when_busy(error: LeaseTimeout, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            if on_busy == Busy.WAIT:
                raise error
            if on_busy == Busy.SKIP:
                log.info("%s skipped: %s", fn.__name__, error)
                emit("busy_skip", key=error.key, function=fn.__name__, duration_s=error.waited)
                return None
            if on_busy == Busy.DEFER:
                message = deferral.find_message(signature.bind(*args, **kwargs).arguments)
                delay = defer_seconds if defer_seconds is not None else period
                deferral.defer(message, queue or "", delay, reason=str(error), storage=storage)
                return None
            return on_busy(error)

        def acquire_args() -> dict[str, Any]:
            if on_busy == Busy.WAIT:
                return {"timeout": wait_timeout}
            return {"blocking": False}

        def finish(lease: BlobLease) -> None:
            try:
                lease.ensure_held()
            except LeaseLost as error:
                log.error(
                    "%s ran past its lease, its effects may overlap another holder's: %s",
                    fn.__name__,
                    error,
                )
                raise
            finally:
                lease.release()

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                with invocation_scope(kwargs):
                    lease = prepare(args, kwargs)
                    try:
                        await lease.acquire_async(**acquire_args())
                    except LeaseTimeout as error:
                        return when_busy(error, args, kwargs)
                    token = _current.set(lease)
                    try:
                        return await fn(*args, **kwargs)
                    finally:
                        _current.reset(token)
                        finish(lease)

            return entry_point(run_async, fn)  # type: ignore[return-value]

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with invocation_scope(kwargs):
                lease = prepare(args, kwargs)
                try:
                    lease.acquire(**acquire_args())
                except LeaseTimeout as error:
                    return when_busy(error, args, kwargs)
                token = _current.set(lease)
                try:
                    return fn(*args, **kwargs)
                finally:
                    _current.reset(token)
                    finish(lease)

        return entry_point(run, fn)  # type: ignore[return-value]

    return decorate


def _invocation_id(kwargs: dict[str, Any]) -> str:
    """The host's invocation id when the function takes a `context`, else a fresh one."""
    context = kwargs.get("context")
    return str(getattr(context, "invocation_id", "") or uuid.uuid4())
