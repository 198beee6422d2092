"""Invoke user functions the way Microsoft's Python worker does, so what fails there fails here.

Facts taken from the worker's source (Azure/azure-functions-python-worker 4.34.0, the worker
of Python 3.7-3.12: `dispatcher.py`, `functions.py`, `bindings/`), not its code:
- sync functions run in one ThreadPoolExecutor per worker process, sized by
  PYTHON_THREADPOOL_THREAD_COUNT (unset or invalid: Python's own default on 3.9+);
  async functions run on the worker's one long-lived event loop;
- the invocation id (dispatcher.py): the loop's tasks are `ContextEnabledTask`s (l. 178-180),
  which inherit the `__azure_function_invocation_id__` attribute of the task that creates
  them (l. 1079-1098); the invocation's task gets the id (l. 594-596), the thread-local
  `_invocation_id_local` (every `context.thread_local_storage`) gets it on the loop's thread,
  never cleared there (l. 656), and `_run_sync_func` sets it in the executor thread for the
  call and clears it after (l. 994-1004). A record's id is `get_current_invocation_id()` at
  emit time: the running task's attribute, else the thread-local (l. 1101-1112, l. 252-254).
  So a record logged from any other thread (`asyncio.to_thread`, a thread the function
  starts) carries none, unless the code sets `context.thread_local_storage.invocation_id`
  itself. In the worker's process that module is `azure_functions_worker.dispatcher`; devhost
  puts its own equivalent under that name (`WORKER_DISPATCHER`) when the real one is not
  installed, so code that reads the id the worker's way (blobsingleton's `_azure_worker`)
  reads devhost's;
- after the call, a function without a `$return` binding that returned anything but None fails
  with the worker's RuntimeError; with a `$return` binding the value is encoded by the binding's
  converter (`http`: HttpResponse or str, anything else is a TypeError);
- `context` is passed when the signature has a `context` parameter; its function_directory is
  the folder of the file that defines the registered callable (`inspect.getfile`, which does
  not follow `__wrapped__`);
- worker extensions (`extension.py`, `utils/wrappers.py`): when PYTHON_ENABLE_WORKER_EXTENSIONS
  is true-like (`1`, `true`, `t`, `yes`, `y`; default: true on Python 3.9 only, read at each
  call), the hooks registered with `azure.functions.ExtensionMeta` run around each invocation,
  in the thread (sync) or task (async) that runs the function, in this order: app-level
  `pre_invocation_app_level(logger, context, func_args)`, function-level `pre_invocation`, the
  function, function-level `post_invocation(..., func_ret)`, app-level
  `post_invocation_app_level`; the post hooks do not run when the function raised; a hook's
  exception is logged (logger `azure_functions_worker.extension.<name>`) and the chain goes
  on. `func_args` is the function's keyword arguments (with `context` when it takes one). At
  load, `post_function_load` and `post_function_load_app_level(name, directory)` run.
- OpenTelemetry (dispatcher.py, docs/telemetry.md): PYTHON_ENABLE_OPENTELEMETRY set to any
  non-empty value (`get_app_setting` returns the string, `if` tests it: "false" enables it,
  l. 384-386) makes the worker call `configure_azure_monitor(connection_string=
  APPLICATIONINSIGHTS_CONNECTION_STRING, logger_name=PYTHON_AZURE_MONITOR_LOGGER_NAME or "")`
  before it loads the app; a failure (an empty connection string: "Invalid connection
  string") is logged as "Error initializing Azure monitor distro." and the app loads without
  it (l. 299-337). Only when that succeeded does each invocation run in the context of the
  host's `traceparent` (l. 664-666, l. 999-1000, `configure_opentelemetry` l. 905-909), so the
  app's spans are children of the host's invocation span. Worker 4.34 never reads
  PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY. The traceparent devhost sends is sampled, as
  the host's is when it records its invocation activity.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib.util
import inspect
import logging
import os
import sys
import threading
import types
import typing
import uuid
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import azure.functions as func
from azure.functions import _abc, meta

log = logging.getLogger("devhost.invocation")

THREADPOOL_SETTING = "PYTHON_THREADPOOL_THREAD_COUNT"
EXTENSIONS_SETTING = "PYTHON_ENABLE_WORKER_EXTENSIONS"
OPENTELEMETRY_SETTING = "PYTHON_ENABLE_OPENTELEMETRY"
CONNECTION_STRING_SETTING = "APPLICATIONINSIGHTS_CONNECTION_STRING"
LOGGER_NAME_SETTING = "PYTHON_AZURE_MONITOR_LOGGER_NAME"


def return_rule_message(function_name: str) -> str:
    """The worker's message, verbatim (its two string literals are joined without a space)."""
    return f"function {function_name!r} without a $return bindingreturned a non-None value"


class FunctionLoadError(RuntimeError):
    """What the worker raises when it cannot load a function (the host marks it in error)."""

    def __init__(self, function_name: str, message: str) -> None:
        super().__init__(f"cannot load the {function_name} function: {message}")


@dataclass(frozen=True)
class FunctionContract:
    """What the worker records about a function when it loads it."""

    name: str
    directory: str
    has_return: bool
    return_binding: str | None  # the $return binding's type, e.g. "http"
    requires_context: bool
    is_async: bool

    @classmethod
    def of(
        cls, name: str, fn: Callable[..., Any], bindings: list[dict[str, Any]]
    ) -> FunctionContract:
        returns = [b for b in bindings if b.get("name") == "$return"]
        return_binding = str(returns[0].get("type")) if returns else None
        params = inspect.signature(fn).parameters  # follows __wrapped__, like the worker
        bound = {str(b.get("name")) for b in bindings}
        if return_binding is not None:
            _check_return_annotation(name, fn, return_binding)
        return cls(
            name=name,
            directory=str(Path(inspect.getfile(fn)).parent),  # does not follow __wrapped__
            has_return=return_binding is not None,
            return_binding=return_binding,
            requires_context="context" in params and "context" not in bound,
            is_async=inspect.iscoroutinefunction(fn),
        )


def _check_return_annotation(name: str, fn: Callable[..., Any], binding: str) -> None:
    """The worker refuses at load a return annotation its binding cannot encode."""
    try:
        annotation = typing.get_type_hints(fn).get("return")
    except Exception as error:
        raise FunctionLoadError(name, f"cannot resolve its annotations: {error!r}") from error
    if annotation is None or binding == "generic":
        return
    if not isinstance(annotation, type):
        raise FunctionLoadError(name, f"has invalid non-type return annotation {annotation!r}")
    converter = func.get_binding_registry().get(binding)
    if converter is not None and not converter.check_output_type_annotation(annotation):
        raise FunctionLoadError(
            name,
            f'Python return annotation "{annotation.__name__}" does not match binding type '
            f'"{binding}"',
        )


# --- the invocation id, as the worker tracks it ------------------------------------------

#: The worker's module that ties records to invocations, by the name it has in its process.
WORKER_DISPATCHER = "azure_functions_worker.dispatcher"

_invocation_local = (
    threading.local()
)  # the worker's one thread-local (context.thread_local_storage)


class ContextEnabledTask(asyncio.Task):  # type: ignore[type-arg]
    """A task that inherits the invocation id of the task that created it."""

    AZURE_INVOCATION_ID = "__azure_function_invocation_id__"

    def __init__(self, coro: Any, loop: asyncio.AbstractEventLoop, context: Any = None) -> None:
        super().__init__(coro, loop=loop, context=context)
        parent = asyncio.current_task(loop)
        invocation_id = getattr(parent, self.AZURE_INVOCATION_ID, None) if parent else None
        if invocation_id is not None:
            self.set_azure_invocation_id(invocation_id)

    def set_azure_invocation_id(self, invocation_id: str) -> None:
        setattr(self, self.AZURE_INVOCATION_ID, invocation_id)


def current_invocation_id() -> str | None:
    """The id the worker would attach to a record logged here: the task's, else the thread's."""
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    if task is not None:
        invocation_id = getattr(task, ContextEnabledTask.AZURE_INVOCATION_ID, None)
        if invocation_id is not None:
            return str(invocation_id)
    value = getattr(_invocation_local, "invocation_id", None)
    return str(value) if value else None


def install_dispatcher() -> None:
    """Put devhost's id machinery where the worker's is in its process (WORKER_DISPATCHER),
    unless the worker itself is installed."""
    if WORKER_DISPATCHER in sys.modules or importlib.util.find_spec(
        WORKER_DISPATCHER.split(".")[0]
    ):
        return
    module = types.ModuleType(WORKER_DISPATCHER, "devhost's stand-in: devhost.invocation")
    module.ContextEnabledTask = ContextEnabledTask  # type: ignore[attr-defined]
    module.get_current_invocation_id = current_invocation_id  # type: ignore[attr-defined]
    module._invocation_id_local = _invocation_local  # type: ignore[attr-defined]
    sys.modules[WORKER_DISPATCHER] = module


_function_names: dict[str, str] = {}  # invocation id -> function name, while it runs


def current_function_name() -> str | None:
    """The function whose invocation the record being logged here belongs to, if known."""
    invocation_id = current_invocation_id()
    return _function_names.get(invocation_id) if invocation_id else None


class InvocationIdFilter(logging.Filter):
    """Puts `invocation_id` ("" when the worker could not tie the record) on every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.invocation_id = current_invocation_id() or ""
        return True


# --- context ------------------------------------------------------------------------------


class _TraceContext(_abc.TraceContext):
    def __init__(self, trace_parent: str, trace_state: str, attributes: dict[str, str]) -> None:
        self._trace_parent = trace_parent
        self._trace_state = trace_state
        self._attributes = attributes

    @property
    def trace_state(self) -> str:
        return self._trace_state

    @property
    def trace_parent(self) -> str:
        return self._trace_parent

    @property
    def attributes(self) -> dict[str, str]:
        return self._attributes


class _RetryContext(_abc.RetryContext):
    def __init__(self, retry_count: int, max_retry_count: int) -> None:
        self._retry_count = retry_count
        self._max_retry_count = max_retry_count

    @property
    def retry_count(self) -> int:
        return self._retry_count

    @property
    def max_retry_count(self) -> int:
        return self._max_retry_count

    @property
    def exception(self) -> Any:
        return None


def _trace_parent() -> str:
    """A W3C traceparent, as the host sends one per invocation."""
    return f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"


class InvocationContext(_abc.Context):
    """The `context` argument, built as the worker builds it from the invocation request."""

    def __init__(
        self,
        function_name: str,
        function_directory: str,
        invocation_id: str | None = None,
        *,
        retry_count: int = 0,
        max_retry_count: int = 0,
    ) -> None:
        self._invocation_id = invocation_id or str(uuid.uuid4())
        self._function_name = function_name
        self._function_directory = function_directory
        self._trace = _TraceContext(_trace_parent(), "", {})
        self._retry = _RetryContext(retry_count, max_retry_count)

    @property
    def invocation_id(self) -> str:
        return self._invocation_id

    @property
    def thread_local_storage(self) -> Any:
        return _invocation_local

    @property
    def function_name(self) -> str:
        return self._function_name

    @property
    def function_directory(self) -> str:
        return self._function_directory

    @property
    def trace_context(self) -> _abc.TraceContext:
        return self._trace

    @property
    def retry_context(self) -> _abc.RetryContext:
        return self._retry


# --- worker extensions, as the worker runs them -------------------------------------------

_TRUE_LIKE = {"1", "true", "t", "yes", "y"}
_FALSE_LIKE = {"0", "false", "f", "no", "n"}
PRE_INVOCATION = ("pre_invocation_app_level", "pre_invocation")
POST_INVOCATION = ("post_invocation", "post_invocation_app_level")


def extensions_enabled(environ: Any = None) -> bool:
    """PYTHON_ENABLE_WORKER_EXTENSIONS as the worker reads it: true-like enables, false-like
    disables, anything else (or unset) keeps the default (true on Python 3.9 only)."""
    raw = (os.environ if environ is None else environ).get(EXTENSIONS_SETTING)
    value = raw.strip().lower() if raw is not None else None
    if value in _TRUE_LIKE:
        return True
    default = sys.version_info[:2] == (3, 9)
    return default and value not in _FALSE_LIKE


def _hooks(hook_name: str, function_name: str) -> list[Any]:
    source = (
        func.ExtensionMeta.get_application_hooks()
        if hook_name.endswith("_app_level")
        else func.ExtensionMeta.get_function_hooks(function_name)
    )
    return list(getattr(source, hook_name, [])) if source is not None else []


def run_invocation_hooks(
    names: tuple[str, ...], context: InvocationContext, args: dict[str, Any], *ret: Any
) -> None:
    """Each hook of `names`, in order, if extensions are enabled; failures logged, not raised."""
    if not extensions_enabled():
        return
    for hook_name in names:
        for hook in _hooks(hook_name, context.function_name):
            ext_logger = logging.getLogger(f"azure_functions_worker.extension.{hook.ext_name}")
            try:
                hook.ext_impl(ext_logger, context, args, *ret)
            except Exception as error:
                ext_logger.error(error, exc_info=True)


def opentelemetry_enabled(environ: Any = None) -> bool:
    """Worker 4.34's test of PYTHON_ENABLE_OPENTELEMETRY (dispatcher.py l. 384-385, with
    `get_app_setting`, utils/common.py l. 74-82): the raw string, or False when unset, in an
    `if`. Any non-empty value enables it, "false" and "0" included; unset or "" does not."""
    return bool((os.environ if environ is None else environ).get(OPENTELEMETRY_SETTING))


_azure_monitor_available = False  # the worker's flag: the distro was configured


def configure_worker_telemetry() -> bool:
    """What worker 4.34 does at start-up (`initialize_azure_monitor`, dispatcher.py l. 299-337)
    when `opentelemetry_enabled()`: `configure_azure_monitor()` with
    APPLICATIONINSIGHTS_CONNECTION_STRING (None when unset, "" when empty) and the logger named
    by PYTHON_AZURE_MONITOR_LOGGER_NAME (default ""), before the app loads. True when
    configured; a failure is logged, as the worker logs it, and the app loads without it."""
    global _azure_monitor_available
    _azure_monitor_available = False
    if not opentelemetry_enabled():
        return False
    worker_log = logging.getLogger("azure_functions_worker")
    try:
        from azure.monitor.opentelemetry import configure_azure_monitor

        os.environ.setdefault("OTEL_EXPERIMENTAL_RESOURCE_DETECTORS", "azure_functions")
        configure_azure_monitor(
            connection_string=os.environ.get(CONNECTION_STRING_SETTING),
            logger_name=os.environ.get(LOGGER_NAME_SETTING, ""),
        )
    except ImportError:
        worker_log.exception("Cannot import Azure Monitor distro.")
        return False
    except Exception:
        worker_log.exception("Error initializing Azure monitor distro.")
        return False
    _azure_monitor_available = True
    worker_log.info("Successfully configured Azure monitor distro.")
    return True


def propagates_trace_context() -> bool:
    """Whether invocations run in the host's trace context: only once the distro is configured
    (`_azure_monitor_available`, dispatcher.py l. 664-666 and l. 999-1000)."""
    return _azure_monitor_available


@contextlib.contextmanager
def host_trace_context(context: InvocationContext) -> Iterator[None]:
    """The invocation in the context the host's traceparent gives, when the worker does so."""
    if not propagates_trace_context():
        yield
        return
    from opentelemetry import context as otel_context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier = {"traceparent": context.trace_context.trace_parent,
               "tracestate": context.trace_context.trace_state}  # fmt: skip
    token = otel_context.attach(TraceContextTextMapPropagator().extract(carrier))
    try:
        yield
    finally:
        otel_context.detach(token)


def run_function_load_hooks(function_name: str, function_directory: str) -> None:
    """`post_function_load` and `post_function_load_app_level`, if extensions are enabled."""
    if not extensions_enabled():
        return
    for hook_name in ("post_function_load", "post_function_load_app_level"):
        for hook in _hooks(hook_name, function_name):
            try:
                hook.ext_impl(function_name, function_directory)
            except Exception as error:
                logging.getLogger("azure_functions_worker").error(error, exc_info=True)


# --- the worker process's runtime: one thread pool, one event loop ------------------------


def thread_pool_size(environ: Any = os.environ) -> int | None:
    """PYTHON_THREADPOOL_THREAD_COUNT, or None (Python's default) when unset or invalid."""
    raw = environ.get(THREADPOOL_SETTING)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        log.warning("%s must be an integer: using the default", THREADPOOL_SETTING)
        return None
    if value < 1:
        log.warning("%s must be at least 1: using the default", THREADPOOL_SETTING)
        return None
    return value


@dataclass
class WorkerRuntime:
    """The executor and the event loop one worker process keeps for its whole life."""

    max_workers: int | None = None
    pool: concurrent.futures.ThreadPoolExecutor = field(init=False)
    loop: asyncio.AbstractEventLoop = field(init=False)
    _thread: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self.pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.max_workers, thread_name_prefix="worker-sync"
        )
        install_dispatcher()
        self.loop = asyncio.new_event_loop()
        self.loop.set_task_factory(
            lambda loop, coro, context=None: ContextEnabledTask(coro, loop=loop, context=context)
        )
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="worker-loop", daemon=True
        )
        self._thread.start()

    def call(
        self,
        contract: FunctionContract,
        fn: Callable[..., Any],
        arguments: dict[str, Any],
        *,
        retry_count: int = 0,
        max_retry_count: int = 0,
    ) -> Any:
        """Run one invocation to completion (from any host thread); its errors propagate."""
        invocation = self._invocation(contract, fn, arguments, retry_count, max_retry_count)
        return asyncio.run_coroutine_threadsafe(invocation, self.loop).result()

    async def _invocation(
        self,
        contract: FunctionContract,
        fn: Callable[..., Any],
        arguments: dict[str, Any],
        retry_count: int,
        max_retry_count: int,
    ) -> Any:
        context = InvocationContext(
            contract.name,
            contract.directory,
            retry_count=retry_count,
            max_retry_count=max_retry_count,
        )
        task = asyncio.current_task()
        assert isinstance(task, ContextEnabledTask)
        task.set_azure_invocation_id(context.invocation_id)
        _function_names[context.invocation_id] = contract.name
        # As the worker: the loop thread's too, and never cleared there (dispatcher.py l. 656).
        context.thread_local_storage.invocation_id = context.invocation_id
        args = dict(arguments)
        if contract.requires_context:
            args["context"] = context
        try:
            if contract.is_async:
                with host_trace_context(context):
                    run_invocation_hooks(PRE_INVOCATION, context, args)
                    result = await fn(**args)
                    run_invocation_hooks(POST_INVOCATION, context, args, result)
            else:
                result = await self.loop.run_in_executor(self.pool, _run_sync, context, fn, args)
        finally:
            _function_names.pop(context.invocation_id, None)
        if result is not None and not contract.has_return:
            raise RuntimeError(return_rule_message(contract.name))
        if contract.return_binding is not None:
            return encode_return(contract.return_binding, result)
        return None

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """Run a coroutine on the worker's loop (tests use it to see the loop is one)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.loop.call_soon_threadsafe(self.loop.stop)


def _run_sync(context: InvocationContext, fn: Callable[..., Any], args: dict[str, Any]) -> Any:
    _invocation_local.invocation_id = context.invocation_id
    try:
        with host_trace_context(context):
            run_invocation_hooks(PRE_INVOCATION, context, args)
            result = fn(**args)
            run_invocation_hooks(POST_INVOCATION, context, args, result)
        return result
    finally:
        _invocation_local.invocation_id = None


def encode_return(binding: str, value: Any) -> meta.Datum:
    """The return value through its binding's converter, with the worker's error when it can't."""
    converter = func.get_binding_registry().get(binding)
    if converter is None:
        return meta.Datum(type="json", value=value)
    try:
        datum: meta.Datum = converter.encode(value, expected_type=None)
    except NotImplementedError:
        raise TypeError(
            f'unable to encode outgoing TypedData: unsupported type "{converter}" for '
            f'Python type "{type(value).__name__}"'
        ) from None
    return datum


_runtime: WorkerRuntime | None = None
_runtime_lock = threading.Lock()
_contracts: dict[str, FunctionContract] = {}


def runtime() -> WorkerRuntime:
    """This process's runtime, created on first use with the app's thread-pool setting."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = WorkerRuntime(thread_pool_size())
        return _runtime


def register(contract: FunctionContract) -> None:
    """Remember a loaded function's contract (indexing does this for every function), and run
    the extensions' load hooks as the worker does when it loads a function."""
    _contracts[contract.name] = contract
    run_function_load_hooks(contract.name, contract.directory)


def invoke(
    fn: Callable[..., Any],
    kwargs: dict[str, Any],
    *,
    function_name: str,
    retry_count: int = 0,
    max_retry_count: int = 0,
) -> Any:
    """Invoke an indexed function as the worker does; returns the encoded `$return` (or None)."""
    contract = _contracts.get(function_name) or FunctionContract.of(function_name, fn, [])
    return runtime().call(
        contract, fn, kwargs, retry_count=retry_count, max_retry_count=max_retry_count
    )
