"""One invocation: its id and owner, the worker's invocation seen from the library's threads
(where the function lives, which invocation a log record belongs to, blocking calls off the
loop), and what operators see of it: one structured log record per lease and run-once event,
spans and metrics through the OpenTelemetry API, a no-op until the app configures an SDK
(docs/internals.md)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import heapq
import inspect
import json
import logging
import os
import re
import socket
import threading
import time
import types
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from opentelemetry import metrics, trace

from blobsingleton import _azure_worker
from blobsingleton.errors import LeaseLost, PayloadMismatch, RunLost

T = TypeVar("T")

_library_log = logging.getLogger("blobsingleton")

if TYPE_CHECKING:
    from blobsingleton._lease import BaseLease

#: The leases the running `@singleton` invocation holds (its guard sets them), and so the lease
#: a `@once` inside it writes its records under.
leases_held: contextvars.ContextVar[tuple[BaseLease, ...]] = contextvars.ContextVar(
    "singleton_leases", default=()
)


@dataclass(frozen=True)
class _Invocation:
    """The worker's invocation a guarded call runs for, as its threads need it."""

    invocation_id: str
    storage: Any  # the worker's thread-local (`context.thread_local_storage`), or None


_current: contextvars.ContextVar[_Invocation | None] = contextvars.ContextVar(
    "blobsingleton_invocation", default=None
)


def current_invocation_id() -> str | None:
    """The id the host and worker give the invocation this code runs for: the one a guard
    entered with (its threads inherit it), else the worker's own lookup here; None outside
    a worker's invocation."""
    current = _current.get()
    return current.invocation_id if current else _azure_worker.current_invocation_id()


def _sync_entry(impl: Callable[..., Any]) -> Callable[..., Any]:
    def entry(*args: Any, **kwargs: Any) -> Any:
        return impl(*args, **kwargs)

    return entry


def _async_entry(impl: Callable[..., Any]) -> Callable[..., Any]:
    async def entry(*args: Any, **kwargs: Any) -> Any:
        return await impl(*args, **kwargs)

    return entry


def entry_point(wrapper: Callable[..., Any], fn: Callable[..., Any]) -> Callable[..., Any]:
    """A function that calls `wrapper`, looks like `fn` (`functools.wraps`) and whose code is
    filed under `fn`'s source file and first line, so `inspect.getfile` names the app's file."""
    original = inspect.unwrap(fn)
    code = getattr(original, "__code__", None)
    if code is None:
        return functools.wraps(fn)(wrapper)
    trampoline = (_async_entry if inspect.iscoroutinefunction(wrapper) else _sync_entry)(wrapper)
    relocated = types.FunctionType(
        trampoline.__code__.replace(
            co_filename=code.co_filename, co_firstlineno=code.co_firstlineno
        ),
        trampoline.__globals__,
        trampoline.__name__,
        None,
        trampoline.__closure__,
    )
    return functools.wraps(fn)(relocated)


@contextlib.contextmanager
def invocation_scope(kwargs: dict[str, Any]) -> Iterator[None]:
    """Remember the worker's invocation (its id and thread-local) for the threads the library
    starts: `context`'s when the function takes one, else what the worker says here, in the
    thread or task it runs the function in (`_azure_worker`)."""
    context = kwargs.get("context")
    invocation_id = str(getattr(context, "invocation_id", "") or "") or current_invocation_id()
    if not invocation_id:  # no worker, no `context`: nothing to tie records to
        yield
        return
    storage = getattr(context, "thread_local_storage", None)
    if storage is None:
        storage = _azure_worker.thread_local_storage()
    token = _current.set(_Invocation(invocation_id, storage))
    try:
        yield
    finally:
        _current.reset(token)


def in_thread(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn` run with the current invocation's id on the thread that runs it, where the worker's
    logging looks for it."""

    def run(*args: Any, **kwargs: Any) -> T:
        current = _current.get()
        storage = current.storage if current else None
        if current is None or storage is None or getattr(storage, "invocation_id", None):
            return fn(*args, **kwargs)
        storage.invocation_id = current.invocation_id
        try:
            return fn(*args, **kwargs)
        finally:
            storage.invocation_id = None

    return run


def thread_target(fn: Callable[[], None]) -> Callable[[], None]:
    """A `threading.Thread` target that runs in a copy of the caller's context, tagged."""
    copied = contextvars.copy_context()

    def run() -> None:
        copied.run(in_thread(fn))

    return run


_capture = threading.local()


class _CaptureInThisThread(logging.Filter):
    """Hold back the library's records in threads that capture them, for the owner to emit."""

    def filter(self, record: logging.LogRecord) -> bool:
        target: list[logging.LogRecord] | None = getattr(_capture, "records", None)
        if target is None or getattr(record, "_blobsingleton_emitting", False):
            return True
        target.append(record)
        return False


# Filters of a logger do not apply to its children's records: every library logger gets one.
for _name in ("blobsingleton", "blobsingleton.events"):
    logging.getLogger(_name).addFilter(_CaptureInThisThread())


@contextlib.contextmanager
def captured_logs(into: list[logging.LogRecord]) -> Iterator[None]:
    """In this thread, append the library's records to `into` instead of emitting them."""
    previous = getattr(_capture, "records", None)
    _capture.records = into
    try:
        yield
    finally:
        _capture.records = previous


def _emit_captured(records: list[logging.LogRecord]) -> None:
    """Emit captured records from the calling thread or task (the one the worker can name)."""
    while records:
        record = records.pop(0)
        setattr(record, "_blobsingleton_emitting", True)  # noqa: B010 - not a LogRecord field
        _library_log.handle(record)


class _Handoff(Generic[T]):
    """Who owns a threaded call's result: the awaiting task, or, once it is gone, the thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._abandoned = False
        self._finished = False
        self.result: T | None = None

    def finish(self, result: T) -> bool:
        """Thread side: True while the task still takes the result."""
        with self._lock:
            self._finished, self.result = True, result
            return not self._abandoned

    def abandon(self) -> bool:
        """Task side (cancelled): True when the call already finished and its result is ours."""
        with self._lock:
            self._abandoned = True
            return self._finished


async def off_loop(call: Callable[[], T], undo: Callable[[T], None] | None = None) -> T:
    """Run `call` in a thread, its log records emitted here; if the task is cancelled, `call`
    still runs to its end and `undo(result)` gives back what it took, off the loop."""
    loop = asyncio.get_running_loop()
    handoff: _Handoff[T] = _Handoff()
    records: list[logging.LogRecord] = []
    context = contextvars.copy_context()

    def run() -> T:
        with captured_logs(records):
            result = context.run(call)
        if not handoff.finish(result):
            _emit_captured(records)  # the task is gone: better without an invocation id than lost
            if undo is not None:
                undo(result)
        return result

    future = loop.run_in_executor(None, run)
    try:
        result = await asyncio.shield(future)
    except asyncio.CancelledError:
        if handoff.abandon() and undo is not None:
            finished: T = handoff.result  # type: ignore[assignment]
            threading.Thread(
                target=undo, args=(finished,), name="blobsingleton-undo", daemon=True
            ).start()
        raise
    except BaseException:
        _emit_captured(records)
        raise
    _emit_captured(records)
    return result


# Who holds a lease: written to the lock blob's metadata so others can read it.


def instance_id() -> str:
    """`WEBSITE_INSTANCE_ID` on Azure; host name and pid elsewhere."""
    return os.environ.get("WEBSITE_INSTANCE_ID") or _host_and_pid()


_host: tuple[int, str] = (0, "")


def _host_and_pid() -> str:
    """This process's host name and pid, asked of the system once per process (a forked child
    asks again)."""
    global _host
    pid = os.getpid()
    if _host[0] != pid:
        _host = (pid, f"{socket.gethostname()}-{pid}")
    return _host[1]


@dataclass(frozen=True)
class Owner:
    """The holder of one acquisition of a lease."""

    instance: str = field(default_factory=instance_id)
    function: str = ""
    invocation_id: str = ""
    acquired_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    token: int | None = None

    def to_metadata(self) -> dict[str, str]:
        """Blob metadata (ASCII only, so non-ASCII values are escaped)."""
        values = {
            "instance": self.instance,
            "function": self.function,
            "invocationid": self.invocation_id,
            "acquiredat": self.acquired_at.isoformat(),
            "token": "" if self.token is None else str(self.token),
        }
        return {k: v.encode("ascii", "backslashreplace").decode() for k, v in values.items()}

    @classmethod
    def from_metadata(cls, metadata: dict[str, str]) -> Owner | None:
        """The owner recorded in `metadata`, or None where no owner was ever published."""
        if "instance" not in metadata:
            return None
        token = metadata.get("token")
        acquired = metadata.get("acquiredat")
        return cls(
            instance=metadata["instance"],
            function=metadata.get("function", ""),
            invocation_id=metadata.get("invocationid", ""),
            acquired_at=datetime.fromisoformat(acquired) if acquired else datetime.min,
            token=int(token) if token else None,
        )


# Events, spans and metrics of invocations and storage requests.
log = logging.getLogger("blobsingleton.events")

#: The library's own event kinds. An app adds its own (`events.emit("stale_writer", ...)`).
KINDS = frozenset(
    {"acquire", "busy_skip", "defer", "renewal_failed", "lost", "takeover", "break", "reset",
     "completed", "replay"}
)  # fmt: skip
_WARNINGS = frozenset({"renewal_failed", "lost", "break", "reset"})
_KIND = re.compile(r"[a-z][a-z0-9_]{0,39}")


def emit(kind: str, *, warning: bool | None = None, **dims: Any) -> None:
    """Log event `kind` (one of `KINDS`, or an app's own: lower-case letters, digits, '_') with
    `dims` (key, instance, function, invocation_id, token, duration_s...); `invocation_id`
    defaults to the worker's id of the current invocation. `warning`: log at WARNING rather
    than INFO (default: as the library logs its kinds; INFO for others)."""
    if not _KIND.fullmatch(kind):
        raise ValueError(f"an event kind is lower-case letters, digits and '_', not {kind!r}")
    loud = kind in _WARNINGS if warning is None else warning
    if not log.isEnabledFor(logging.WARNING if loud else logging.INFO):
        return  # nobody listens at that level: nothing to build
    if dims.get("invocation_id") is None:  # the worker's id for the invocation, if any
        dims["invocation_id"] = current_invocation_id()
    values = {"instance": instance_id(), **{n: v for n, v in dims.items() if v is not None}}
    if isinstance(values.get("duration_s"), float):
        values["duration_s"] = round(values["duration_s"], 3)
    dimensions = {"event": kind, **values}
    text = " ".join(f"{name}={_quoted(value)}" for name, value in dimensions.items())
    log.log(
        logging.WARNING if loud else logging.INFO,
        "%s",
        text,
        extra={**dimensions, "custom_dimensions": dimensions},
    )


def _quoted(value: Any) -> str:
    text = str(value)
    return json.dumps(text) if not text or any(c in text for c in ' "=\\') else text


def emit_lease(kind: str, lease: Any, **dims: Any) -> None:
    """`emit` with what a lease knows: key, token, owner (function, invocation), held for."""
    owner = getattr(lease, "owner", None)
    acquired = getattr(owner, "acquired_at", None)
    known = {
        "key": lease.key,
        "token": getattr(lease, "_token", None) or getattr(owner, "token", None),
        "instance": getattr(owner, "instance", None),
        "function": getattr(owner, "function", None) or None,
        "invocation_id": getattr(owner, "invocation_id", None) or None,
        "duration_s": (datetime.now(UTC) - acquired).total_seconds() if acquired else None,
    }
    emit(kind, **{**known, **dims})


_tracer = trace.get_tracer("blobsingleton")
_meter = metrics.get_meter("blobsingleton")
#: Seconds a call waited for its key (a lease, or a run-once record in progress elsewhere).
WAITED = _meter.create_histogram("blobsingleton.wait", unit="s")
#: Seconds a key was held: a lease from acquire to release, a run-once claim to its settling.
HELD = _meter.create_histogram("blobsingleton.hold", unit="s")
#: Guarded invocations, by decorator and outcome.
INVOCATIONS = _meter.create_counter("blobsingleton.invocations")
LEASES_LOST = _meter.create_counter("blobsingleton.leases.lost")
TAKEOVERS = _meter.create_counter("blobsingleton.takeovers")
#: Storage operations by kind (as the library names them; the SDK's retries not counted).
STORAGE = _meter.create_counter("blobsingleton.storage.operations")


def annotate(**attributes: Any) -> None:
    """Set `blobsingleton.*` attributes on the current span (None values left out)."""
    span = trace.get_current_span()
    for name, value in attributes.items():
        if value is not None:
            span.set_attribute(f"blobsingleton.{name}", value)


def storage(operation: str) -> None:
    STORAGE.add(1, {"operation": operation})


@contextlib.contextmanager
def span(name: str, **attributes: Any) -> Iterator[float]:
    """A span named `name`, child of the current one; yields its monotonic start."""
    with _tracer.start_as_current_span(name):
        annotate(**attributes)
        yield time.monotonic()


class Invocation:
    """What a guarded invocation's span and metrics say: set `outcome`, call `waited()`."""

    def __init__(self, decorator: str) -> None:
        self.decorator, self.outcome = decorator, "ran"
        self.started = self.admitted = time.monotonic()

    def waited(self, **attributes: Any) -> None:
        """The guard admitted the call (or said why not): its wait, key, token, attempt."""
        self.admitted = time.monotonic()
        wait = self.admitted - self.started
        WAITED.record(wait, {"decorator": self.decorator})
        annotate(wait_s=round(wait, 6), **attributes)

    def finished(self, error: BaseException | None) -> None:
        if isinstance(error, RunLost | LeaseLost):
            self.outcome = "lost"
        elif error is not None and self.outcome == "ran":
            self.outcome = "mismatch" if isinstance(error, PayloadMismatch) else "failed"
        if self.outcome in ("ran", "lost"):
            HELD.record(time.monotonic() - self.admitted, {"decorator": self.decorator})
        INVOCATIONS.add(1, {"decorator": self.decorator, "outcome": self.outcome})
        annotate(outcome=self.outcome)


@contextlib.contextmanager
def invocation(decorator: str, template: str) -> Iterator[Invocation]:
    """The span of one guarded invocation, `"{decorator} {template}"`."""
    call = Invocation(decorator)
    with span(f"{decorator} {template}"):
        try:
            yield call
        except BaseException as error:
            call.finished(error)
            raise
        call.finished(None)


class FirstBeats:
    """One thread per process that starts `@once` heartbeats when first due."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, threading.Event, weakref.WeakMethod[Any]]] = []
        self._changed = threading.Condition()
        self._count = 0
        self._thread: threading.Thread | None = None

    def schedule(self, at: float, stopped: threading.Event, start: Callable[[], None]) -> None:
        """Call method `start` at monotonic time `at`, unless `stopped` is set by then or its
        object is gone. The object is held weakly: most runs are over long before their first
        beat, and held until then (a third of the in-progress timeout) a storm's finished runs
        would pile up with their results."""
        with self._changed:
            while self._due and self._due[0][2].is_set():
                heapq.heappop(self._due)  # runs over: their entries leave as they reach the top
            self._count += 1
            heapq.heappush(self._due, (at, self._count, stopped, weakref.WeakMethod(start)))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="once-first-beats", daemon=True
                )
                self._thread.start()
            elif self._due[0][1] == self._count:
                self._changed.notify()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._due or self._due[0][0] > time.monotonic():
                    timeout = self._due[0][0] - time.monotonic() if self._due else None
                    self._changed.wait(timeout)
                _, _, stopped, method = heapq.heappop(self._due)
            start = method()
            if start is not None and not stopped.is_set():
                try:
                    start()
                except Exception:  # never let one run's start stop every later one
                    _library_log.exception("run-once: could not start a heartbeat")


first_beats = FirstBeats()
