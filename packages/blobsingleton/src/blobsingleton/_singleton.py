"""`@singleton`: WebJobs' `[Singleton]` for Python v2 functions, on blob leases.

    @bp.queue_trigger(arg_name="msg", queue_name="%IMPORT_QUEUE%", connection="AzureWebJobsStorage")
    @singleton("import-{account}", on_busy=Busy.DEFER, queue="%IMPORT_QUEUE%")
    def import_account(msg: func.QueueMessage) -> None:
        lease = current_lease()          # token for fenced writes, ensure_held() before effects

Goes under the trigger decorator (innermost). The wrapper keeps the signature and the
coroutine-ness the Python worker inspects when it indexes the function.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import logging
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from blobsingleton import _defaults
from blobsingleton._busy import (
    RUN,
    Admission,
    Busy,
    BusyHandling,
    BusyPolicy,
    Guard,
    Guarded,
    MaybeSkipped,
    check_policy,
    guarded,
)
from blobsingleton._connection import StorageAccount
from blobsingleton._lease import DEFAULT_PERIOD, BaseLease
from blobsingleton._owner import Owner
from blobsingleton._templates import resolve_key
from blobsingleton.errors import LeaseLost, LeaseTimeout, OutsideGuardedCall

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient

log = logging.getLogger("blobsingleton")

F = TypeVar("F", bound=Callable[..., Any])

_current: contextvars.ContextVar[BaseLease | None] = contextvars.ContextVar(
    "singleton_lease", default=None
)


def current_lease() -> BaseLease:
    """The lease the running `@singleton` invocation holds (its token, `ensure_held()`)."""
    lease = _current.get()
    if lease is None:
        raise OutsideGuardedCall("current_lease()", "@singleton")
    return lease


class _LeaseGuard(Guard):
    """One invocation's lease: taken before the body, checked and released after it."""

    def __init__(self, lease: BaseLease, wait_timeout: float, function: str) -> None:
        self.lease = lease
        self.function = function
        self.wait_timeout = wait_timeout

    def _acquire_args(self, wait: bool) -> dict[str, Any]:
        return {"timeout": self.wait_timeout} if wait else {"blocking": False}

    def enter(self, wait: bool) -> Admission:
        try:
            self.lease.acquire(**self._acquire_args(wait))
        except LeaseTimeout as error:
            return Admission(run=False, busy=error)
        return RUN

    async def enter_async(self, wait: bool) -> Admission:
        try:
            await self.lease.acquire_async(**self._acquire_args(wait))
        except LeaseTimeout as error:
            return Admission(run=False, busy=error)
        return RUN

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        token = _current.set(self.lease)
        try:
            yield
        finally:
            _current.reset(token)

    def settle(self, result: Any, failed: bool) -> None:
        """A lease lost mid-run is raised after the body, so the host sees the overlap."""
        try:
            self.lease.ensure_held()
        except LeaseLost as error:
            log.error(
                "%s ran past its lease, its effects may overlap another holder's: %s",
                self.function,
                error,
            )
            raise
        finally:
            self.lease.release()


@overload
def singleton(
    scope: str,
    *,
    on_busy: Literal[Busy.WAIT] | Callable[[Exception], Any] = ...,
    wait_timeout: float = ...,
    period: float = ...,
    queue: str | None = ...,
    defer_seconds: float | None = ...,
    schedule: str | None = ...,
    container: ContainerClient | None = ...,
    storage: StorageAccount | None = ...,
    fair: bool | None = ...,
    namespace: str | None = ...,
) -> Guarded: ...
@overload
def singleton(
    scope: str,
    *,
    on_busy: BusyPolicy,
    wait_timeout: float = ...,
    period: float = ...,
    queue: str | None = ...,
    defer_seconds: float | None = ...,
    schedule: str | None = ...,
    container: ContainerClient | None = ...,
    storage: StorageAccount | None = ...,
    fair: bool | None = ...,
    namespace: str | None = ...,
) -> MaybeSkipped: ...
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
    namespace: str | None = None,
) -> Guarded | MaybeSkipped:
    """Run the function only while holding the lease named by `scope` (a key template).

    `on_busy`: `Busy.WAIT` (default, up to `wait_timeout` s, then `LeaseTimeout` so the host
    retries), `Busy.SKIP`, `Busy.DEFER` (needs `queue`; delay `defer_seconds`, default one
    lease period), or a callable returning the result to give instead (e.g. a 409).
    A lease lost mid-run is logged and raised as `LeaseLost` after the function returns.
    `fair` (default: True under `Busy.WAIT`): waiters wait in line and get the key in arrival
    order (an instance at most a few turns in a row); costs one request more per invocation
    (the releaser looks at the line).
    Async functions never block the loop; cancelled, they release (or never take) the lease.
    `namespace`: whose keys these are (default: app setting BLOBSINGLETON_NAMESPACE, else the
    Functions host id), so two apps on one storage account do not block each other.
    """
    check_policy(on_busy, queue)
    in_line = on_busy == Busy.WAIT if fair is None else fair
    delay = defer_seconds if defer_seconds is not None else period
    busy = BusyHandling(on_busy, queue, delay, storage)

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn)

        def make_guard(*args: Any, **kwargs: Any) -> _LeaseGuard:
            key = resolve_key(scope, signature, args, kwargs, schedule=schedule)
            owner = Owner(function=fn.__name__, invocation_id=_invocation_id(kwargs))
            lease = _defaults.lease(
                key, period=period, container=container, storage=storage, owner=owner,
                fair=in_line, namespace=namespace,
            )  # fmt: skip
            return _LeaseGuard(lease, wait_timeout, fn.__name__)

        return guarded(fn, make_guard, busy)

    return decorate


def _invocation_id(kwargs: dict[str, Any]) -> str:
    """The host's invocation id when the function takes a `context`, else a fresh one."""
    context = kwargs.get("context")
    return str(getattr(context, "invocation_id", "") or uuid.uuid4())
