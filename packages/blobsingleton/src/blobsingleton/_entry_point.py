"""A guarded function's entry point filed under the app's source file and line, so tools that
ask where a function lives (`inspect.getfile`, the host's indexing) name the app's code."""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from typing import Any


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
