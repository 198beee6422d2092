"""devhost runs azure-functions worker extensions as the Python worker does (extension.py):
only when PYTHON_ENABLE_WORKER_EXTENSIONS is true-like (default off on Python 3.10+), app-level
pre, function-level pre, the function, function-level post, app-level post, in the thread
(sync) or task (async) that runs the function, with its keyword arguments; no post hook after
a function that raised; a failing hook is logged and the invocation goes on."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

import azure.functions as func
import pytest

from devhost.invocation import (
    EXTENSIONS_SETTING,
    FunctionContract,
    WorkerRuntime,
    extensions_enabled,
)

#: What the hooks saw, while a test listens (the registry is global to the process).
SEEN: list[tuple[Any, ...]] | None = None


def _note(*event: Any) -> None:
    if SEEN is not None:
        SEEN.append(event)


def _where() -> tuple[int, Any]:
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    return threading.get_ident(), task


class RecordingAppExtension(func.AppExtensionBase):
    @classmethod
    def pre_invocation_app_level(
        cls, logger: Any, context: Any, func_args: Any = None, *args: Any, **kwargs: Any
    ) -> None:
        _note("app pre", context.function_name, dict(func_args or {}), _where())

    @classmethod
    def post_invocation_app_level(
        cls, logger: Any, context: Any, func_args: Any = None, func_ret: Any = None,
        *args: Any, **kwargs: Any,
    ) -> None:  # fmt: skip
        _note("app post", context.function_name, func_ret, _where())


class FailingAppExtension(func.AppExtensionBase):
    @classmethod
    def pre_invocation_app_level(cls, logger: Any, context: Any, *args: Any, **kw: Any) -> None:
        if SEEN is not None:
            raise RuntimeError("a broken extension")


class RecordingFunctionExtension(func.FuncExtensionBase):
    def __init__(self, file_path: str) -> None:
        super().__init__(file_path)

    def pre_invocation(self, logger: Any, context: Any, *args: Any, **kw: Any) -> None:
        _note("function pre", context.function_name)

    def post_invocation(self, logger: Any, context: Any, *args: Any, **kw: Any) -> None:
        _note("function post", context.function_name)


def _register_function_extension() -> None:
    """Function-level extensions attach to a function folder under AzureWebJobsScriptRoot."""
    saved = os.environ.get("AzureWebJobsScriptRoot")
    os.environ["AzureWebJobsScriptRoot"] = "/app"
    try:
        RecordingFunctionExtension("/app/hooked/__init__.py")  # for the function "hooked"
    finally:
        if saved is None:
            os.environ.pop("AzureWebJobsScriptRoot")
        else:
            os.environ["AzureWebJobsScriptRoot"] = saved


_register_function_extension()


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> Any:
    global SEEN
    SEEN = []
    monkeypatch.setenv(EXTENSIONS_SETTING, "1")
    runtime = WorkerRuntime(2)
    try:
        yield SEEN, runtime
    finally:
        SEEN = None
        runtime.close()


def _contract(fn: Any) -> FunctionContract:
    return FunctionContract.of("hooked", fn, [])


def test_sync_hooks_run_in_order_in_the_thread_that_runs_the_function(
    seen: Any, caplog: pytest.LogCaptureFixture
) -> None:
    events, runtime = seen

    def hooked(msg: str) -> None:
        _note("function", _where())

    runtime.call(_contract(hooked), hooked, {"msg": "m1"})
    kinds = [e[0] for e in events]
    assert kinds == ["app pre", "function pre", "function", "function post", "app post"]
    assert events[0][1:3] == ("hooked", {"msg": "m1"})
    thread = events[2][1][0]
    assert events[0][3][0] == thread and events[4][3][0] == thread
    assert thread != threading.get_ident()  # the worker's pool thread, not the caller's
    # the failing extension was logged under the worker's logger name, the chain went on
    assert any(
        r.name == "azure_functions_worker.extension.FailingAppExtension" for r in caplog.records
    )


def test_async_hooks_run_in_the_invocations_task(seen: Any) -> None:
    events, runtime = seen

    async def hooked(msg: str) -> None:
        _note("function", _where())

    runtime.call(_contract(hooked), hooked, {"msg": "m2"})
    assert [e[0] for e in events] == [
        "app pre", "function pre", "function", "function post", "app post"
    ]  # fmt: skip
    task = events[2][1][1]
    assert task is not None and events[0][3][1] is task and events[4][3][1] is task


def test_no_post_hook_after_a_function_that_raised(seen: Any) -> None:
    events, runtime = seen

    def hooked(msg: str) -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        runtime.call(_contract(hooked), hooked, {"msg": "m3"})
    assert [e[0] for e in events] == ["app pre", "function pre"]


@pytest.mark.parametrize("value", [None, "0", "false", "no", "maybe"])
def test_extensions_do_not_run_unless_the_setting_enables_them(
    seen: Any, monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    events, runtime = seen
    if value is None:
        monkeypatch.delenv(EXTENSIONS_SETTING)
    else:
        monkeypatch.setenv(EXTENSIONS_SETTING, value)

    def hooked(msg: str) -> None:
        _note("function", _where())

    runtime.call(_contract(hooked), hooked, {"msg": "m4"})
    assert [e[0] for e in events] == ["function"]


def test_the_setting_reads_as_the_worker_reads_it() -> None:
    for value in ("1", "true", "True", " yes ", "t", "y"):
        assert extensions_enabled({EXTENSIONS_SETTING: value})
    for value in ("0", "false", "", "maybe"):
        assert not extensions_enabled({EXTENSIONS_SETTING: value})
    assert not extensions_enabled({})  # the default on Python 3.10 and later
