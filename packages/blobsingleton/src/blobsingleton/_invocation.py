"""The worker's invocation seen from the library's threads: where the function lives, which
invocation a log record belongs to, blocking calls off the loop (docs/internals.md)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
import threading
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from blobsingleton import _azure_worker

T = TypeVar("T")

log = logging.getLogger("blobsingleton")


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


def emit(records: list[logging.LogRecord]) -> None:
    """Emit captured records from the calling thread or task (the one the worker can name)."""
    while records:
        record = records.pop(0)
        setattr(record, "_blobsingleton_emitting", True)  # noqa: B010 - not a LogRecord field
        log.handle(record)


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
            emit(records)  # the task is gone: better without an invocation id than lost
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
        emit(records)
        raise
    emit(records)
    return result
