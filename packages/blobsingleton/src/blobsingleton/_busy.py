"""The busy policy (DEFER's re-enqueue too) and the sync/async guard wrapper both decorators
share (docs/internals.md)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar, ParamSpec, Protocol, TypeVar, overload

from blobsingleton import _keys, _misuse
from blobsingleton import _telemetry as telemetry
from blobsingleton._backends import current_backends
from blobsingleton._connection import (
    StorageAccount,
    from_settings,
    resolve_placeholders,
)
from blobsingleton._entry_point import entry_point
from blobsingleton._events import emit
from blobsingleton._invocation import in_thread, invocation_scope
from blobsingleton._off_loop import off_loop
from blobsingleton._queues import QueueMessageLike, require_sdk
from blobsingleton._queues import send_message as enqueue
from blobsingleton._telemetry import Invocation

log = logging.getLogger("blobsingleton")

MAX_DELAY = 7 * 24 * 3600  # the queue service's visibility timeout limit

F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
R = TypeVar("R")


class Guarded(Protocol):
    """What a decorator that always runs the function (or raises) does to its type."""

    @overload
    def __call__(
        self, fn: Callable[P, Coroutine[Any, Any, R]], /
    ) -> Callable[P, Coroutine[Any, Any, R]]: ...
    @overload
    def __call__(self, fn: Callable[P, R], /) -> Callable[P, R]: ...


class MaybeSkipped(Protocol):
    """A decorator that may not run the function: SKIP, DEFER or an abandoned run give None."""

    @overload
    def __call__(
        self, fn: Callable[P, Coroutine[Any, Any, R]], /
    ) -> Callable[P, Coroutine[Any, Any, R | None]]: ...
    @overload
    def __call__(self, fn: Callable[P, R], /) -> Callable[P, R | None]: ...


@dataclass(frozen=True)
class Admission:
    """A guard's verdict: run, or return `result` without running, or `busy` (and the key
    could be free in `retry_after` s: DEFER's delay unless the decorator fixes one)."""

    run: bool
    result: Any = None
    busy: Exception | None = None
    retry_after: float = 0.0
    #: Why it did not run, when not busy (its telemetry outcome): "replayed", "skipped".
    outcome: str = "skipped"


RUN = Admission(run=True)


class Guard(ABC):
    """What protects one invocation: entered before the body, settled after it."""

    @abstractmethod
    def enter(self, wait: bool) -> Admission:
        """Blocking: take the guard (waiting if `wait`), or say why not."""

    @abstractmethod
    async def enter_async(self, wait: bool) -> Admission:
        """`enter` without blocking the loop; cancelled, it leaves nothing taken."""

    @abstractmethod
    def settle(self, result: Any, failed: bool) -> None:
        """Blocking: give the guard back after the body (which returned `result` or raised)."""

    def describe(self) -> dict[str, Any]:
        """What its invocation's span records: key, token, attempt."""
        return {}

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Context the body runs in (e.g. the current lease); none by default."""
        yield


#: How long a WAIT waits for a busy key by default (and a DEFER given no queue message).
DEFAULT_WAIT_TIMEOUT = 60.0


@dataclass(frozen=True)
class Wait:
    """`Busy.wait(timeout, hold)`: wait for the key, then raise so the host retries."""

    timeout: float = DEFAULT_WAIT_TIMEOUT
    hold: float | None = None


@dataclass(frozen=True)
class Skip:
    """`Busy.skip(hold)`: log and return None; this delivery is complete."""

    hold: float | None = None


@dataclass(frozen=True)
class Defer:
    """`Busy.defer(queue, after, hold, storage)`: re-enqueue a copy of the queue message."""

    queue: str | None
    after: float | None = None
    hold: float | None = None
    storage: StorageAccount | None = None


@dataclass(frozen=True)
class Answer:
    """`Busy.answer(fn, hold)`: `fn(busy_error)` is the call's result (an HTTP 409)."""

    fn: Callable[[Exception], Any]
    hold: float | None = None


#: What `busy=` takes: a policy value, or a callable given the busy error (`Busy.answer(fn)`).
BusyPolicy = Wait | Skip | Defer | Answer | Callable[[Exception], Any]


def _seconds(value: float | timedelta | None) -> float | None:
    return value.total_seconds() if isinstance(value, timedelta) else value


class Busy:
    """What a decorated call does when its key is busy: `@once(key, busy=...)`,
    `@singleton(key, busy=...)`.

    - `Busy.wait(timeout=60.0, hold=None)` (the default, also `Busy.WAIT`): wait up to `timeout`
      seconds, then raise (`LeaseTimeout` or `AlreadyInProgress`) so the host retries;
    - `Busy.skip(hold=None)` (also `Busy.SKIP`): log and return None at once; this delivery is
      complete;
    - `Busy.defer(queue="%QUEUE_SETTING%", after=None, hold=None, storage=None)`: re-enqueue a
      copy of the invocation's queue message on `queue`, visible `after` seconds later
      (default: when the key may be free), and return None (this delivery completes). Needs
      the function's `func.QueueMessage` argument and the `[queue]` extra. The copy goes to
      `storage`'s queue, else the account the decorator's records or locks live in, else
      AzureWebJobsStorage. `Busy.DEFER` names no queue, so a decorator refuses it;
    - `Busy.answer(fn, hold=None)`, or `fn` itself: `fn(busy_error)` is the call's result (an
      HTTP 409).

    `hold` (`@once` only): seconds a delivery that finds its key in progress watches the record
    in its process before the policy applies (default 3 s, 0 under skip; under wait at most
    `timeout`). `@singleton` has no hold and refuses one.
    """

    WAIT: ClassVar[Wait] = Wait()
    """`Busy.wait()`: wait up to 60 s, then raise so the host retries (the default)."""
    SKIP: ClassVar[Skip] = Skip()
    """`Busy.skip()`: log and return None."""
    DEFER: ClassVar[Defer] = Defer(queue=None)
    """Refused by the decorators: a deferral needs its queue, `Busy.defer(queue=...)`."""

    @staticmethod
    def wait(timeout: float | timedelta = DEFAULT_WAIT_TIMEOUT,
             hold: float | timedelta | None = None) -> Wait:  # fmt: skip
        """Wait up to `timeout` s for the key, then raise so the host retries."""
        return Wait(_seconds(timeout) or 0.0, _seconds(hold))

    @staticmethod
    def skip(hold: float | timedelta | None = None) -> Skip:
        """Log and return None: this delivery is complete."""
        return Skip(_seconds(hold))

    @staticmethod
    def defer(queue: str, after: float | timedelta | None = None,
              hold: float | timedelta | None = None,
              storage: StorageAccount | None = None) -> Defer:  # fmt: skip
        """Re-enqueue a copy of the queue message on `queue` (`%SETTING%` resolved), visible in
        `after` s (default: when the key may be free), and return None."""
        return Defer(queue, _seconds(after), _seconds(hold), storage)

    @staticmethod
    def answer(fn: Callable[[Exception], Any], hold: float | timedelta | None = None) -> Answer:
        """`fn(busy_error)` is the call's result (an HTTP 409 with Retry-After)."""
        return Answer(fn, _seconds(hold))


def _policy_name(policy: Wait | Skip | Defer | Answer) -> str:
    return type(policy).__name__.lower()


@dataclass(frozen=True)
class BusyHandling:
    """The busy policy of one decorated function (checked when it is decorated), and the
    account a deferral's copy goes to."""

    policy: Wait | Skip | Defer | Answer
    #: DEFER's account: the policy's, else where the decorator's records or locks live.
    storage: StorageAccount | None = None
    #: DEFER's delay when the policy gives none (None: the guard's own `retry_after`).
    default_after: float | None = None

    @classmethod
    def of(cls, busy: object, decorator: str, *, storage: StorageAccount | None = None,
           default_after: float | None = None) -> BusyHandling:  # fmt: skip
        """`busy=` of `@decorator`, checked: a policy value or a callable, else a clear error."""
        if isinstance(busy, (Wait, Skip, Defer, Answer)):
            policy = busy
            if isinstance(busy, Answer) and not callable(busy.fn):
                raise TypeError(
                    f"@{decorator}(busy=Busy.answer(fn)): fn must be callable, not {busy.fn!r}"
                )
        elif callable(busy):
            policy = Answer(busy)
        else:
            raise TypeError(
                f"@{decorator}(busy=...) takes Busy.wait(...), Busy.skip(), "
                f"Busy.defer(queue=...) or a callable given the busy error, not {busy!r}"
            )
        if isinstance(policy, Defer) and not policy.queue:
            raise ValueError(
                f"@{decorator}(busy=Busy.DEFER) needs its queue: "
                "busy=Busy.defer(queue='%QUEUE_SETTING%') (where to re-enqueue)"
            )
        for name in ("timeout", "hold", "after"):
            value = getattr(policy, name, None)
            if value is not None and not value >= 0:
                raise ValueError(
                    f"@{decorator}(busy=Busy.{_policy_name(policy)}({name}=...)) must be at "
                    f"least 0 seconds, not {value!r}"
                )
        if decorator == "singleton" and policy.hold is not None:
            raise ValueError(
                f"@singleton(busy=Busy.{_policy_name(policy)}(hold=...)): a lease has no hold "
                "(a waiter is handed the lease when it is released); leave hold out"
            )
        account = policy.storage if isinstance(policy, Defer) else None
        return cls(policy, account or storage, default_after)

    @property
    def waits(self) -> bool:
        """WAIT: the guard waits for the key itself."""
        return isinstance(self.policy, Wait)

    def waits_for(self, arguments: dict[str, Any]) -> bool:
        """Whether a call given `arguments` waits for a busy key: WAIT, and a DEFER given no
        queue message (it has nothing to re-enqueue: it waits as WAIT does)."""
        return self.waits or (self.defers and find_message(arguments) is None)

    @property
    def defers(self) -> bool:
        return isinstance(self.policy, Defer)

    @property
    def wait_timeout(self) -> float:
        """How long a WAIT (or a DEFER given no queue message) waits for the key."""
        return self.policy.timeout if isinstance(self.policy, Wait) else DEFAULT_WAIT_TIMEOUT

    def hold(self, default: float) -> float:
        """Seconds a `@once` delivery finding its key in progress watches first: the policy's,
        else 0 under skip and `default` otherwise; under wait at most its timeout."""
        hold = self.policy.hold
        if hold is None:
            hold = 0.0 if isinstance(self.policy, Skip) else default
        return min(hold, self.wait_timeout) if self.waits else hold

    def not_admitted(
        self, call: Invocation, admission: Admission, name: str, arguments: dict[str, Any]
    ) -> Any:
        """What a call not admitted to run returns, its telemetry outcome set: a replay's
        result (or None); busy, the policy's answer (`apply`), where WAIT, and a DEFER given
        no queue message, raise the busy error (blocking: DEFER sends). A single call and each
        item of `fn.each` end here."""
        if admission.busy is None:
            call.outcome = admission.outcome
            return admission.result
        if self.waits_for(arguments):
            call.outcome = "busy"
            if self.defers:
                log.warning(
                    "%s: Busy.defer found no queue message among its arguments: it waited for "
                    "the key as Busy.wait does", name,
                )  # fmt: skip
            raise admission.busy
        call.outcome = {Skip: "skipped", Defer: "deferred"}.get(type(self.policy), "busy")
        return self.apply(admission, name, arguments)

    def apply(self, admission: Admission, name: str, arguments: dict[str, Any]) -> Any:
        """WAIT raises, SKIP returns None, DEFER re-enqueues (blocking), a callable decides."""
        error = admission.busy
        assert error is not None, "a busy policy applied to an admission that is not busy"
        policy = self.policy
        if isinstance(policy, Wait):
            raise error
        if isinstance(policy, Skip):
            log.info("%s skipped: %s", name, error)
            emit(
                "busy_skip", key=getattr(error, "key", None), function=name,
                duration_s=getattr(error, "waited", None),
            )  # fmt: skip
            return None
        if isinstance(policy, Defer):
            message = find_message(arguments)
            assert message is not None, "DEFER applied without its message (see `waits_for`)"
            delay = policy.after if policy.after is not None else self.default_after
            delay = delay if delay is not None else admission.retry_after
            self._defer(policy.queue or "", message, delay, reason=str(error))
            return None
        return policy.fn(error)

    def _defer(self, queue: str, message: QueueMessageLike, delay: float, reason: str) -> None:
        """Enqueue a copy of `message` on the queue (`%SETTING%` resolved), visible in `delay` s."""
        name = resolve_placeholders(queue)
        seconds = max(1, min(MAX_DELAY, round(delay)))
        copy_id = send_message(self.storage, name, message.get_body(), seconds)
        log.info(  # (the id the message's trigger metadata gave, which a JSON body may replace)
            "deferred message %r on %s by %d s as message %s: %s",
            message.id, name, seconds, copy_id, reason,
        )  # fmt: skip
        emit("defer", queue=name, message_id=copy_id, delay_s=seconds, reason=reason)


def find_message(arguments: dict[str, object]) -> QueueMessageLike | None:
    """The queue message among a guarded function's arguments (str and bytes are not)."""
    messages = (v for v in arguments.values() if isinstance(v, QueueMessageLike))
    return next((m for m in messages if not isinstance(m, (str, bytes))), None)


def may_take_message(fn: Callable[..., Any]) -> bool:
    """Whether a queue message can be among `fn`'s arguments: a parameter annotated as one,
    or one without an annotation, or `Any` (only the call can tell)."""
    annotations = [p.annotation for p in inspect.signature(fn).parameters.values()]
    anything = (inspect.Parameter.empty, Any, object, "Any", "typing.Any", "object")
    return any(a in anything or "QueueMessage" in str(a) for a in annotations)


class _Unguarded(Guard):
    """No guard: the function runs as it is (`@once(run_without_key=True)`, no key given)."""

    def enter(self, wait: bool) -> Admission:
        return RUN

    async def enter_async(self, wait: bool) -> Admission:
        return RUN

    def settle(self, result: Any, failed: bool) -> None:
        pass


unguarded = _Unguarded()


def guarded(
    fn: F, make_guard: Callable[..., Guard], busy: BusyHandling, label: tuple[str, str]
) -> F:
    """Wrap `fn` (sync or async, signature kept for the worker) in the guard `make_guard` builds
    from each invocation's arguments, in a span `label` names (decorator, key template). DEFER
    is refused on a function that can never take a queue message (all parameters annotated,
    none as one), naming what fits the trigger they name; a call given another trigger's
    argument raises before anything is claimed; a call with no trigger argument waits as WAIT
    does."""
    if busy.defers and not may_take_message(fn):
        raise TypeError(unfit_defer(fn.__qualname__, annotated_trigger(fn)))
    if busy.defers:
        require_sdk(fn.__qualname__)
    signature = inspect.signature(fn)
    name = fn.__name__

    if inspect.iscoroutinefunction(fn):

        async def run_async(*args: Any, **kwargs: Any) -> Any:
            refuse_unfit_arguments(fn, busy, args, kwargs)
            with invocation_scope(kwargs), telemetry.invocation(*label) as call:
                guard = make_guard(*args, **kwargs)
                arguments = signature.bind(*args, **kwargs).arguments
                admission = await guard.enter_async(busy.waits_for(arguments))
                call.waited(**guard.describe())
                if not admission.run:
                    if admission.busy is not None and busy.defers:  # a blocking send
                        return await off_loop(
                            in_thread(lambda: busy.not_admitted(call, admission, name, arguments))
                        )
                    return busy.not_admitted(call, admission, name, arguments)
                try:
                    with guard.running():
                        result = await fn(*args, **kwargs)
                except BaseException:
                    # Cancelled or failed: given back even if this task is cancelled again.
                    await off_loop(in_thread(lambda: guard.settle(None, failed=True)))
                    raise
                await off_loop(in_thread(lambda: guard.settle(result, failed=False)))
                return result

        return _policies(entry_point(run_async, fn), fn, busy)  # type: ignore[return-value]

    def run(*args: Any, **kwargs: Any) -> Any:
        if asyncio.events._get_running_loop() is not None:  # a sync guard blocks the loop
            _misuse.warn_on_loop(fn)
        refuse_unfit_arguments(fn, busy, args, kwargs)
        with invocation_scope(kwargs), telemetry.invocation(*label) as call:
            guard = make_guard(*args, **kwargs)
            arguments = signature.bind(*args, **kwargs).arguments
            admission = guard.enter(busy.waits_for(arguments))
            call.waited(**guard.describe())
            if not admission.run:
                return busy.not_admitted(call, admission, name, arguments)
            try:
                with guard.running():
                    result = fn(*args, **kwargs)
            except BaseException:
                guard.settle(None, failed=True)
                raise
            guard.settle(result, failed=False)
            return result

    return _policies(entry_point(run, fn), fn, busy)  # type: ignore[return-value]


# Busy policies that fit the trigger (the library README's table): DEFER re-enqueues a Storage
# queue message; every other trigger is refused it, by annotation when decorated, by binding
# when indexed (`check_busy_policy`), by the trigger argument at the call.

#: The busy policies a guarded function carries, outermost decorator last (for indexing).
POLICIES_ATTRIBUTE = "__blobsingleton_busy__"

#: What fits each trigger when its key is busy, and what the host does after a raise.
FITS: dict[str, str] = {
    "serviceBusTrigger": (
        "Busy.wait() (after its timeout it raises: the host abandons the message and Service "
        "Bus redelivers it, up to the queue's max delivery count, then dead-letters it), "
        "Busy.skip() (the message completes: right when what is busy is a duplicate of it) or a "
        "callable"
    ),
    "eventHubTrigger": (
        "Busy.wait() with a retry policy on the function (a raise is not redelivered: the host "
        "checkpoints past the event), Busy.skip() or a callable"
    ),
    "eventGridTrigger": (
        "Busy.wait() (a raise fails the delivery: Event Grid retries it with backoff for up to "
        "24 hours), Busy.skip() or a callable"
    ),
    "cosmosDBTrigger": (
        "Busy.wait() with a retry policy on the function (a raise is not redelivered: the lease "
        "checkpoints past the batch), Busy.skip() or a callable"
    ),
    "blobTrigger": (
        "Busy.wait() (a raise is retried by the blob extension, 5 tries by default, then the "
        "blob goes to the webjobs-blobtrigger-poison queue), Busy.skip() or a callable"
    ),
    "httpTrigger": (
        "a callable that returns an HTTP 409 or 429 with Retry-After, Busy.wait() (a raise is "
        "an HTTP 500) or Busy.skip()"
    ),
    "timerTrigger": (
        "Busy.skip() (another instance runs this occurrence), Busy.wait() (a raise fails this "
        "occurrence; a retry policy reruns it) or a callable"
    ),
}
_ANNOTATED = re.compile(
    r"\b(ServiceBusMessage|EventHubEvent|EventGridEvent|CloudEvent|HttpRequest|TimerRequest"
    r"|InputStream|DocumentList|Document)\b"
)


def annotated_trigger(fn: Callable[..., Any]) -> str | None:
    """The binding type of the trigger `fn`'s annotations name, if any (an output binding's
    `func.Out[...]` names none)."""
    found: list[str] = []
    for parameter in inspect.signature(fn).parameters.values():
        text = str(parameter.annotation)
        match = _ANNOTATED.search(text)
        if parameter.annotation is not inspect.Parameter.empty and "Out[" not in text and match:
            found.append(_keys.TRIGGERS[match.group(1).replace("DocumentList", "Document")].binding)
    # A blob or Cosmos DB input binding may sit beside another trigger: that trigger first.
    found.sort(key=lambda binding: binding in ("blobTrigger", "cosmosDBTrigger"))
    return found[0] if found else None


def unfit_defer(function: str, trigger: str | None) -> str:
    """Why Busy.defer cannot guard `function` triggered by `trigger`, and what fits instead."""
    if trigger is None or trigger not in FITS:
        return (
            f"{function}: Busy.defer(queue=...) re-enqueues the invocation's Storage queue "
            "message; pass the func.QueueMessage to the function it guards, or choose "
            "Busy.wait(), Busy.skip() or a callable"
        )
    return (
        f"{function}: Busy.defer(queue=...) re-enqueues a Storage queue message, and a "
        f"{trigger} function has none to re-enqueue; for a {trigger} use {FITS[trigger]}"
    )


def refuse_unfit_arguments(
    fn: Callable[..., Any], busy: BusyHandling, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """At the call: DEFER given a trigger argument that is not a queue message (a function
    whose parameters did not say so) raises before anything is claimed."""
    if not busy.defers:
        return
    values = [*args, *kwargs.values()]
    if any(_keys.trigger_of(v) is _keys.QUEUE for v in values):
        return
    for value in values:
        item = _keys.first_item(value)
        kind = _keys.trigger_of(value if item is None else item)
        if kind is not None:
            raise TypeError(unfit_defer(fn.__qualname__, kind.binding))


def _policies(
    wrapper: Callable[..., Any], fn: Callable[..., Any], busy: BusyHandling
) -> Callable[..., Any]:
    inner: tuple[Wait | Skip | Defer | Answer, ...] = getattr(fn, POLICIES_ATTRIBUTE, ())
    setattr(wrapper, POLICIES_ATTRIBUTE, (*inner, busy.policy))
    return wrapper


def check_busy_policy(function: Callable[..., Any], trigger: str, name: str | None = None) -> None:
    """Refuse (`TypeError`, naming what fits) a guarded `function` whose busy policy cannot
    work on the trigger its binding names (`trigger`: the binding type, "serviceBusTrigger").
    What a host calls when it indexes the app (devhost does); an unguarded function passes."""
    policies: tuple[Wait | Skip | Defer | Answer, ...] = getattr(function, POLICIES_ATTRIBUTE, ())
    if any(isinstance(p, Defer) for p in policies) and trigger != "queueTrigger":
        raise TypeError(unfit_defer(name or function.__qualname__, trigger))


def check_busy_policies(functions: Iterable[Any]) -> None:
    """`check_busy_policy` for each indexed function (`azure.functions.Function`: its
    `get_user_function()` and the trigger binding of its `get_function_json()`), as in a test:
    `check_busy_policies(app.get_functions())`."""
    for function in functions:
        bindings = json.loads(function.get_function_json()).get("bindings", [])
        triggers = [str(b.get("type", "")) for b in bindings]
        trigger = next((t for t in triggers if t.endswith("Trigger")), "")
        check_busy_policy(function.get_user_function(), trigger, function.get_function_name())


def send_message(storage: StorageAccount | None, queue: str, body: bytes, delay: int) -> str:
    """Enqueue `body` on `queue`, visible in `delay` s (DEFER's copy): the backends' queue, else
    `storage`'s (default: AzureWebJobsStorage). Returns the new message's id."""
    backends = current_backends()
    if backends is not None:
        return backends.send_message(queue, body, delay)
    return enqueue(storage or from_settings(), queue, body, delay)
