"""The worker's invocation a guarded call runs for, seen from the library's threads: its id
(the host's, from `context` or the worker), and the thread-local the worker's logging reads it
from, so a record logged in a library thread names its invocation (docs/internals.md)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from blobsingleton import _azure_worker

T = TypeVar("T")


@dataclass(frozen=True)
class _Invocation:
    """The worker's invocation a guarded call runs for, as its threads need it."""

    invocation_id: str
    storage: Any  # the worker's thread-local (`context.thread_local_storage`), or None


_worker_invocation: contextvars.ContextVar[_Invocation | None] = contextvars.ContextVar(
    "blobsingleton_invocation", default=None
)


def current_invocation_id() -> str | None:
    """The id the host and worker give the invocation this code runs for: the one a guard
    entered with (its threads inherit it), else the worker's own lookup here; None outside
    a worker's invocation."""
    current = _worker_invocation.get()
    return current.invocation_id if current else _azure_worker.current_invocation_id()


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
    token = _worker_invocation.set(_Invocation(invocation_id, storage))
    try:
        yield
    finally:
        _worker_invocation.reset(token)


def in_thread(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn` run with the current invocation's id on the thread that runs it, where the worker's
    logging looks for it."""

    def run(*args: Any, **kwargs: Any) -> T:
        current = _worker_invocation.get()
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
