"""`@singleton`: WebJobs' `[Singleton]` for Python functions, on blob leases (docs/internals.md)."""

from __future__ import annotations

import contextlib
import inspect
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

from blobsingleton import _misuse
from blobsingleton._backends import current_backends
from blobsingleton._blob_lease import BlobLease
from blobsingleton._busy import (
    RUN,
    Admission,
    Answer,
    Busy,
    BusyHandling,
    BusyPolicy,
    F,
    Guard,
    Guarded,
    MaybeSkipped,
    Wait,
    guarded,
)
from blobsingleton._connection import Storage, StorageAccount
from blobsingleton._invocation import current_invocation_id
from blobsingleton._keys import Scope, encode_key, function_scope, resolve_key
from blobsingleton._lease import DEFAULT_PERIOD, BaseLease, check_limit, leases_held
from blobsingleton._line import FairLease, LineMemory
from blobsingleton._off_loop import off_loop
from blobsingleton._owner import Owner
from blobsingleton._semaphore import LeaseSemaphore
from blobsingleton.errors import LeaseLost, LeaseTimeout, OutsideGuardedCall

log = logging.getLogger("blobsingleton")


#: The attribute a `@singleton` wrapper carries (copied by outer wrappers' `functools.wraps`).
MARK = "__blobsingleton_singleton__"


def current_lease(key: str | None = None) -> BaseLease:
    """The lease the running `@singleton` invocation holds; with several, the one of `key`."""
    leases = leases_held.get()
    if not leases:
        raise OutsideGuardedCall("current_lease()", "@singleton")
    if key is None:
        if len(leases) > 1:
            raise LookupError(f"this invocation holds {len(leases)} leases: name the key")
        return leases[0]
    for lease in leases:
        if lease.key == key:
            return lease
    raise LookupError(f"this invocation holds no lease on {key!r}")


class _LeaseGuard(Guard):
    """One invocation's leases: taken in order before the body, checked and released after."""

    def __init__(self, leases: list[BaseLease], wait_timeout: float, function: str) -> None:
        self.leases = leases
        self.function = function
        self.wait_timeout = wait_timeout
        self._taken: list[BaseLease] = []

    def enter(self, wait: bool) -> Admission:
        deadline = time.monotonic() + self.wait_timeout
        for lease in self.leases:
            try:
                lease.acquire(**self._args(wait, deadline))
            except LeaseTimeout as error:
                self._release_taken()
                return Admission(run=False, busy=error)
            except BaseException:
                self._release_taken()
                raise
            self._taken.append(lease)
        return RUN

    async def enter_async(self, wait: bool) -> Admission:
        deadline = time.monotonic() + self.wait_timeout
        for lease in self.leases:
            try:
                await lease.acquire_async(**self._args(wait, deadline))
            except LeaseTimeout as error:
                await off_loop(self._release_taken)
                return Admission(run=False, busy=error)
            except BaseException:
                await off_loop(self._release_taken)
                raise
            self._taken.append(lease)
        return RUN

    def _args(self, wait: bool, deadline: float) -> dict[str, Any]:
        if not wait:
            return {"blocking": False}
        return {"timeout": max(0.0, deadline - time.monotonic())}

    def _release_taken(self) -> None:
        while self._taken:
            self._taken.pop().release()

    def describe(self) -> dict[str, Any]:
        tokens = [lease.token for lease in self._taken]
        key = ",".join(lease.key for lease in self.leases)
        return {"key": key, "token": tokens[0] if len(tokens) == 1 else None}

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        token = leases_held.set(tuple(self.leases))
        try:
            yield
        finally:
            leases_held.reset(token)

    def settle(self, result: Any, failed: bool) -> None:
        """A lease lost mid-run is raised after the body, so the host sees the overlap."""
        try:
            for lease in self.leases:
                try:
                    lease.ensure_held()
                except LeaseLost as error:
                    log.error(
                        "%s ran past its lease, its effects may overlap another holder's: %s",
                        self.function,
                        error,
                    )
                    raise
        finally:
            self._release_taken()


#: Where `@singleton` keeps its locks: blobs of an account (`StorageAccount`, or a `Storage`
#: with its namespace or container; None: AzureWebJobsStorage).
Locks = StorageAccount | Storage | None


@overload
def singleton(
    key: str | Sequence[str], /, *, scope: Scope = ...,
    busy: Wait | Answer | Callable[[Exception], Any] = ..., period: float = ...,
    schedule: str | None = ..., storage: Locks = ..., fair: bool | None = ..., limit: int = ...,
) -> Guarded: ...  # fmt: skip
@overload
def singleton(
    key: str | Sequence[str], /, *, scope: Scope = ..., busy: BusyPolicy, period: float = ...,
    schedule: str | None = ..., storage: Locks = ..., fair: bool | None = ..., limit: int = ...,
) -> MaybeSkipped: ...  # fmt: skip
@_misuse.teaches_renames("singleton")
def singleton(
    key: str | Sequence[str],
    /,
    *,
    scope: Scope = "function",
    busy: BusyPolicy = Busy.WAIT,
    period: float = DEFAULT_PERIOD,
    schedule: str | None = None,
    storage: Locks = None,
    fair: bool | None = None,
    limit: int = 1,
) -> Guarded | MaybeSkipped:
    """Run the function only while holding the lease of `key`, a key template, or of several
    (taken in blob-name order, so functions sharing keys never wait on each other in a cycle).

    `scope`: the function's own lease ("function") or the app's ("app": shared by functions
    naming the key, as WebJobs' `SingletonScope.Host`). `busy`: `Busy.wait(timeout=60)` (then
    `LeaseTimeout` so the host retries), `Busy.skip()`, `Busy.defer(queue=..., after=...)`
    (re-enqueue, by default one `period` later), or a callable returning the result instead
    (e.g. a 409); `Busy`. `period`: the lease's length, 15-60 s. `fair` (default: True under
    wait): waiters get the key in arrival order (an instance a few turns in a row at most), for
    one more request per call once a line may have formed (the call waited, or came within 2 s
    of this function's last release of the key); an uncontended call is 3 requests.
    `schedule`: a timer's schedule, for `{occurrence}` keys.
    `storage`: where the locks live, blobs of a `StorageAccount` or of a `Storage(account,
    namespace)` or `Storage(container=..., namespace=...)` (default: AzureWebJobsStorage,
    `locks`, namespace BLOBSINGLETON_NAMESPACE else the host id). `limit`: up to this many
    invocations hold a key at once (a `LeaseSemaphore`: a slot each, with its own fencing
    token). A lease lost mid-run is logged and raised as `LeaseLost` after the function
    returns. Async functions never block the loop; cancelled, they release (or never take) the
    lease. Mistakes (an unknown busy policy, `Busy.DEFER` without its queue, a hold) raise
    when decorated."""
    if scope not in ("function", "app"):
        raise ValueError(f"@singleton(scope=...) must be 'function' or 'app', not {scope!r}")
    templates = [key] if isinstance(key, str) else list(key)
    if not templates:
        raise ValueError("@singleton needs a key")
    if storage is not None and not isinstance(storage, (Storage, StorageAccount)):
        raise TypeError(
            "@singleton(storage=...) takes a StorageAccount or a Storage(account, namespace), "
            f"not {storage!r}"
        )
    place = storage if isinstance(storage, Storage) else Storage(account=storage)
    handling = BusyHandling.of(busy, "singleton", storage=place.account, default_after=period)
    wait_timeout = handling.wait_timeout
    in_line = handling.waits if fair is None else fair
    check_limit(limit)

    def decorate(fn: F) -> F:
        _misuse.check_target("singleton", templates, fn)
        if getattr(fn, MARK, False):
            raise TypeError(
                f"{fn.__qualname__} has two @singleton decorators: name every key it needs in "
                "one, @singleton(['a-{x}', 'b-{y}']), which takes them in one order"
            )
        signature = inspect.signature(fn)
        memory = LineMemory() if in_line else None  # this function's memory of its keys' lines
        scope_id = function_scope(fn) if scope == "function" else None
        where: dict[str, Any] = dict(
            container=place.container, storage=place.account, namespace=place.namespace,
            scope=scope_id,
        )  # fmt: skip

        def make_guard(*args: Any, **kwargs: Any) -> _LeaseGuard:
            keys = {resolve_key(t, signature, args, kwargs, schedule=schedule) for t in templates}
            owner = Owner(function=fn.__name__, invocation_id=_invocation_id(kwargs))
            options: dict[str, Any] = dict(
                limit=limit, period=period, owner=owner, fair=in_line, memory=memory
            )
            leases = [
                default_lease(resolved, **options, **where)
                for resolved in sorted(keys, key=encode_key)
            ]
            return _LeaseGuard(leases, wait_timeout, fn.__name__)

        wrapper = guarded(fn, make_guard, handling, ("singleton", ",".join(templates)))
        setattr(wrapper, MARK, True)
        return wrapper

    return decorate


def _invocation_id(kwargs: dict[str, Any]) -> str:
    """The host's invocation id (from `context`, or the worker's, with or without `context`:
    `_invocation.invocation_scope`), else, outside a worker, a fresh one."""
    context = kwargs.get("context")
    return str(getattr(context, "invocation_id", "") or current_invocation_id() or uuid.uuid4())


def default_lease(
    key: str,
    *,
    limit: int = 1,
    fair: bool = False,
    memory: LineMemory | None = None,
    **options: Any,
) -> BaseLease | BlobLease:
    """The lease a `@singleton` takes: the backends' a test set, else `BlobLease(key,
    **options)`, a `FairLease` remembering its line in `memory` if `fair` (it lists the line
    only once it met one), or with `limit` above 1 a `LeaseSemaphore` of that many holders."""
    backends = current_backends()
    if backends is not None:
        return backends.lease(key, limit=limit, fair=fair, **options)
    if limit > 1:
        return LeaseSemaphore(key, limit, fair=fair, **options)
    if fair:
        return FairLease(key, memory=memory, look_always=False, **options)
    return BlobLease(key, **options)
