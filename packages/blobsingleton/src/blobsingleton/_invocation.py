"""Where the function lives and which invocation a log record belongs to (docs/internals.md)."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

_context: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "blobsingleton_invocation_context", default=None
)


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


@contextmanager
def invocation_scope(kwargs: dict[str, Any]) -> Iterator[None]:
    """Remember the worker's `context` (when the function takes one) for threads started here."""
    context = kwargs.get("context")
    if getattr(context, "thread_local_storage", None) is None:
        yield
        return
    token = _context.set(context)
    try:
        yield
    finally:
        _context.reset(token)


@contextmanager
def tagged_thread() -> Iterator[None]:
    """In a thread started here: the invocation id where the worker's logging looks for it."""
    context = _context.get()
    storage = getattr(context, "thread_local_storage", None)
    if storage is None or getattr(storage, "invocation_id", None):
        yield
        return
    storage.invocation_id = context.invocation_id
    try:
        yield
    finally:
        storage.invocation_id = None


def in_thread(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn` run with the current invocation's id on the thread that runs it."""

    def run(*args: Any, **kwargs: Any) -> T:
        with tagged_thread():
            return fn(*args, **kwargs)

    return run


async def to_thread(fn: Callable[..., T], *args: Any) -> T:
    """`asyncio.to_thread` whose records carry the invocation id (context variables travel)."""
    return await asyncio.to_thread(in_thread(fn), *args)


def thread_target(fn: Callable[[], None]) -> Callable[[], None]:
    """A `threading.Thread` target that runs in a copy of the caller's context, tagged."""
    copied = contextvars.copy_context()

    def run() -> None:
        copied.run(in_thread(fn))

    return run
