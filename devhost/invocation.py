"""Call a user function the way the Python worker does: sync or async, optional `context`."""

from __future__ import annotations

import asyncio
import inspect
import threading
import uuid
from collections.abc import Callable
from typing import Any

from azure.functions import _abc


class _TraceContext(_abc.TraceContext):
    @property
    def trace_state(self) -> str:
        return ""

    @property
    def trace_parent(self) -> str:
        return ""

    @property
    def attributes(self) -> dict[str, str]:
        return {}


class InvocationContext(_abc.Context):
    """The `context` argument: invocation id and function name, no tracing."""

    _local = threading.local()

    def __init__(self, function_name: str, function_directory: str) -> None:
        self._invocation_id = str(uuid.uuid4())
        self._function_name = function_name
        self._function_directory = function_directory

    @property
    def invocation_id(self) -> str:
        return self._invocation_id

    @property
    def thread_local_storage(self) -> Any:
        return self._local

    @property
    def function_name(self) -> str:
        return self._function_name

    @property
    def function_directory(self) -> str:
        return self._function_directory

    @property
    def trace_context(self) -> _abc.TraceContext:
        return _TraceContext()

    @property
    def retry_context(self) -> Any:
        return None


def _wants_context(fn: Callable[..., Any]) -> bool:
    try:
        return "context" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def invoke(
    fn: Callable[..., Any],
    kwargs: dict[str, Any],
    *,
    function_name: str,
    function_directory: str = ".",
) -> Any:
    """Run the user function to completion in the calling thread; exceptions propagate."""
    if _wants_context(fn) and "context" not in kwargs:
        kwargs = {**kwargs, "context": InvocationContext(function_name, function_directory)}
    result = fn(**kwargs)
    if inspect.isawaitable(result):
        result = asyncio.run(_await(result))
    return result


async def _await(awaitable: Any) -> Any:
    return await awaitable
