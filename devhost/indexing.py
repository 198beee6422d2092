"""Index the app the way the Python worker does: import it and ask it for its functions.

The functions, their triggers and settings come only from `app.get_functions()` and each
function's `get_function_json()` bindings, so the host can never drift from the app.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import azure.functions as func

from devhost.invocation import FunctionContract, FunctionLoadError, register
from shared.settings import resolve_placeholders


class IndexingError(RuntimeError):
    """The app module could not be imported or indexed."""


@dataclass(frozen=True)
class QueueTrigger:
    queue_name: str  # as written in the binding, may hold %SETTING%
    connection: str = "AzureWebJobsStorage"

    def resolved_queue_name(self) -> str:
        return resolve_placeholders(self.queue_name).lower()


@dataclass(frozen=True)
class TimerTrigger:
    schedule: str  # as written, may hold %SETTING%
    run_on_startup: bool = False
    use_monitor: bool = True

    def resolved_schedule(self) -> str:
        return resolve_placeholders(self.schedule)


@dataclass(frozen=True)
class HttpTrigger:
    route: str
    methods: tuple[str, ...] | None = None  # None = any method
    auth_level: str = "function"  # anonymous | function | admin


@dataclass(frozen=True)
class BlobTrigger:
    path: str  # as written, may hold %SETTING%: "container/blob-name-pattern"
    connection: str = "AzureWebJobsStorage"
    source: str = "LogsAndContainerScan"  # the extension's default; "EventGrid" on Flex

    def resolved_path(self) -> str:
        return resolve_placeholders(self.path)


@dataclass(frozen=True)
class UnsupportedTrigger:
    type: str


Trigger = QueueTrigger | TimerTrigger | HttpTrigger | BlobTrigger | UnsupportedTrigger


@dataclass(frozen=True)
class IndexedFunction:
    """One function: its name, trigger, the argument the trigger binds to, and the callable."""

    name: str
    trigger: Trigger
    arg_name: str
    user_function: Callable[..., Any]
    other_bindings: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    contract: FunctionContract | None = None  # what the worker records when it loads it


def _bool(value: Any, default: bool) -> bool:
    if value is None:
        return default
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)


def describe_trigger(function_name: str, binding: dict[str, Any]) -> Trigger:
    """A typed description of a trigger binding from function.json-style metadata."""
    kind = str(binding.get("type", ""))
    if kind == "queueTrigger":
        return QueueTrigger(
            queue_name=str(binding["queueName"]),
            connection=binding.get("connection") or "AzureWebJobsStorage",
        )
    if kind == "timerTrigger":
        return TimerTrigger(
            schedule=str(binding["schedule"]),
            run_on_startup=_bool(binding.get("runOnStartup"), False),
            use_monitor=_bool(binding.get("useMonitor"), True),
        )
    if kind == "httpTrigger":
        methods = binding.get("methods")
        return HttpTrigger(
            route=str(binding.get("route") or function_name).strip("/"),
            methods=tuple(str(m).upper() for m in methods) if methods else None,
            auth_level=str(binding.get("authLevel") or "function").lower(),
        )
    if kind == "blobTrigger":
        return BlobTrigger(
            path=str(binding.get("path") or ""),
            connection=binding.get("connection") or "AzureWebJobsStorage",
            source=str(binding.get("source") or "LogsAndContainerScan"),
        )
    return UnsupportedTrigger(type=kind)


def find_app(module: Any) -> func.FunctionRegister:
    """The FunctionApp (FunctionRegister) object the module defines, like the Python worker."""
    apps = [v for v in vars(module).values() if isinstance(v, func.FunctionRegister)]
    if len(apps) != 1:
        raise IndexingError(
            f"{module.__name__} must define exactly one FunctionApp, found {len(apps)}"
        )
    return apps[0]


def import_app(module_name: str, app_dir: Path | str = ".") -> func.FunctionRegister:
    """Import the app module (from `app_dir`) and return its FunctionApp."""
    path = str(Path(app_dir).resolve())
    if path not in sys.path:
        sys.path.insert(0, path)
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise IndexingError(f"cannot import app module {module_name!r}: {error!r}") from error
    return find_app(module)


def index_app(app: func.FunctionRegister) -> list[IndexedFunction]:
    """Every function of the app with its typed trigger."""
    indexed: list[IndexedFunction] = []
    for function in app.get_functions():
        metadata = json.loads(function.get_function_json())
        bindings: list[dict[str, Any]] = metadata.get("bindings", [])
        triggers = [b for b in bindings if str(b.get("type", "")).endswith("Trigger")]
        if len(triggers) != 1:
            raise IndexingError(f"{function.get_function_name()}: expected one trigger")
        trigger_binding = triggers[0]
        others = tuple(
            b for b in bindings if b is not trigger_binding and b.get("name") != "$return"
        )
        user_function = function.get_user_function()
        # get_functions() has named every function (its Python name unless function_name= says)
        name = function.get_function_name() or user_function.__name__
        try:
            contract = FunctionContract.of(name, user_function, bindings)
        except FunctionLoadError as error:
            raise IndexingError(str(error)) from error
        register(contract)
        indexed.append(
            IndexedFunction(
                name=name,
                trigger=describe_trigger(name, trigger_binding),
                arg_name=str(trigger_binding["name"]),
                user_function=user_function,
                other_bindings=others,
                contract=contract,
            )
        )
    return indexed


def load_functions(module_name: str, app_dir: Path | str = ".") -> list[IndexedFunction]:
    """Import and index in one step."""
    return index_app(import_app(module_name, app_dir))
