"""The invocation's trigger queue message, recorded by a Python worker extension for DEFER.

The Python worker calls app-level extensions (`azure.functions.AppExtensionBase`) around every
invocation, in the thread that runs the function: `pre_invocation_app_level(logger, context,
func_args)` before it, `post_invocation_app_level(...)` after it (not after a function that
raised). Sync functions run in the worker's thread pool, so the hooks run in that pool thread;
async functions run on the worker's event loop, and the hooks run in the invocation's own
task. Either way a `ContextVar` set in the pre hook is what the function (and the guard in
it) sees, and only that invocation sees it: every pre hook sets it anew (None for a function
with no queue message), a pool thread runs one invocation at a time, and a task's context is
its own copy.

The worker runs extensions only when `PYTHON_ENABLE_WORKER_EXTENSIONS` is true (default: true
on Python 3.9 only, false on 3.10 and later) and registers an `AppExtensionBase` subclass when
the class is defined. `register_worker_extension()` defines it once (idempotent);
`@singleton`/`@once` with a DEFER policy call it at decoration. Without the extension (or
outside the worker), DEFER falls back to the queue message among the guarded function's
arguments.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import threading
import types
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class QueueMessageLike(Protocol):
    """What the queue helpers and deferral need of `azure.functions.QueueMessage`."""

    @property
    def id(self) -> str | None: ...

    @property
    def dequeue_count(self) -> int | None: ...

    def get_body(self) -> bytes: ...


_trigger_message: ContextVar[QueueMessageLike | None] = ContextVar(
    "blobsingleton_trigger_message", default=None
)
_registered: list[type] = []
_register_lock = threading.Lock()

#: The worker's setting that turns extensions on (Python 3.10+: off unless set to true/1).
ENABLE_SETTING = "PYTHON_ENABLE_WORKER_EXTENSIONS"


_TRUE_LIKE = frozenset({"1", "true", "t", "yes", "y"})


def extensions_on() -> bool:
    """Whether the worker runs extensions: `PYTHON_ENABLE_WORKER_EXTENSIONS` true-like (the
    worker's default is off on every Python this library supports)."""
    return (os.environ.get(ENABLE_SETTING) or "").strip().lower() in _TRUE_LIKE


def may_take_message(fn: Callable[..., Any]) -> bool:
    """Whether a queue message can be among `fn`'s arguments: a parameter annotated as one,
    or one without an annotation (only the call can tell)."""
    for parameter in inspect.signature(fn).parameters.values():
        annotation = parameter.annotation
        if annotation is inspect.Parameter.empty or "QueueMessage" in str(annotation):
            return True
    return False


def trigger_message() -> QueueMessageLike | None:
    """The queue message that triggered the running invocation, when the extension ran."""
    return _trigger_message.get()


def queue_message_in(arguments: dict[str, object] | None) -> QueueMessageLike | None:
    """The queue message among a function's arguments, if any (str and bytes are not)."""
    for value in (arguments or {}).values():
        if isinstance(value, QueueMessageLike) and not isinstance(value, (str, bytes)):
            return value
    return None


def record(func_args: dict[str, object] | None) -> None:
    """The pre-invocation hook's work: this invocation's trigger message (or None)."""
    _trigger_message.set(queue_message_in(func_args))


def forget() -> None:
    """The post-invocation hook's work."""
    _trigger_message.set(None)


@contextlib.contextmanager
def recorded(message: QueueMessageLike | None) -> Iterator[None]:
    """`message` recorded for the block, as the hooks do around an invocation."""
    token = _trigger_message.set(message)
    try:
        yield
    finally:
        _trigger_message.reset(token)


def register_worker_extension() -> type:
    """Register (once) the app-level worker extension that records the trigger message.

    Needs `azure-functions` (the worker's SDK); returns the extension class. The worker calls
    it only when `PYTHON_ENABLE_WORKER_EXTENSIONS` is true (set it in the app's settings)."""
    with _register_lock:
        if _registered:
            return _registered[0]
        # Looked up, not imported by name: azure-functions ships no type information, and the
        # extension's class is made from the worker's base class at run time.
        base: Any = importlib.import_module("azure.functions").AppExtensionBase

        def pre_invocation_app_level(
            cls: type, logger: Any, context: Any, func_args: dict[str, object] | None = None,
            *args: Any, **kwargs: Any,
        ) -> None:  # fmt: skip
            record(func_args)

        def post_invocation_app_level(cls: type, *args: Any, **kwargs: Any) -> None:
            forget()

        def body(namespace: dict[str, Any]) -> None:
            namespace["__doc__"] = "Records the invocation's trigger queue message for DEFER."
            namespace["__module__"] = __name__
            namespace["pre_invocation_app_level"] = classmethod(pre_invocation_app_level)
            namespace["post_invocation_app_level"] = classmethod(post_invocation_app_level)

        BlobsingletonTriggerMessage = types.new_class(
            "BlobsingletonTriggerMessage", (base,), exec_body=body
        )
        _registered.append(BlobsingletonTriggerMessage)
        return BlobsingletonTriggerMessage


def register_if_available() -> None:
    """`register_worker_extension()` when azure-functions is installed; nothing otherwise."""
    with contextlib.suppress(ImportError):
        register_worker_extension()
