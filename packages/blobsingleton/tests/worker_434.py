"""Microsoft's Python worker 4.34.0 running invocations and tying log records to them, as its
source does it: the mechanism restated, not the worker's code (its 4.x releases are not on
PyPI, the platform ships them; 4.34 pins azure-functions 1.22.0b4, which the app's lock
cannot take). Line numbers: Azure/azure-functions-python-worker, tag 4.34.0,
azure_functions_worker/dispatcher.py.

- The loop's task factory makes `ContextEnabledTask`s (l. 178-180); one inherits the
  `__azure_function_invocation_id__` attribute of the task that creates it (l. 1079-1098).
- An invocation request runs in its own task (the gRPC thread's `create_task`, l. 1046-1047),
  which gets the invocation id (l. 594-596); the thread-local `_invocation_id_local` (every
  `context.thread_local_storage`, l. 927-929) gets it on the loop's thread, never cleared there
  (l. 656). `context` is passed only when the function takes it (l. 657-658).
- An async function is awaited in that task (l. 664-669); a sync one runs in the worker's
  ThreadPoolExecutor through `_run_sync_func`, which sets the thread-local for the call and
  clears it after (l. 671-674, l. 994-1004).
- The logging handler, in the emitting thread, asks `get_current_invocation_id()`: the running
  task's attribute, else the thread-local (l. 1101-1112), and ships the record with that id
  (l. 252-254) or none.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import sys
import threading
import types
import uuid
from collections.abc import Callable
from typing import Any

#: The dispatcher module's name in the worker's process (`python -m azure_functions_worker`).
MODULE = "azure_functions_worker.dispatcher"
ATTRIBUTE = "__azure_function_invocation_id__"


def dispatcher_module() -> types.ModuleType:
    """A module with the dispatcher's three names the library reads."""
    module = types.ModuleType(MODULE, "worker 4.34's invocation ids, restated (worker_434.py)")
    local = threading.local()

    class ContextEnabledTask(asyncio.Task):  # type: ignore[type-arg]
        def __init__(self, coro: Any, loop: Any, context: Any = None) -> None:
            super().__init__(coro, loop=loop, context=context)
            parent = asyncio.current_task(loop)
            if getattr(parent, ATTRIBUTE, None) is not None:
                setattr(self, ATTRIBUTE, getattr(parent, ATTRIBUTE))

    def get_current_invocation_id() -> str | None:
        try:
            task = asyncio.current_task()
        except RuntimeError:
            task = None
        if task is not None and getattr(task, ATTRIBUTE, None) is not None:
            return str(getattr(task, ATTRIBUTE))
        return getattr(local, "invocation_id", None)

    module.ContextEnabledTask = ContextEnabledTask  # type: ignore[attr-defined]
    module.get_current_invocation_id = get_current_invocation_id  # type: ignore[attr-defined]
    module._invocation_id_local = local  # type: ignore[attr-defined]
    return module


class Context:
    """`context` as the worker builds it (bindings/context.py): its thread_local_storage is
    the dispatcher's one thread-local."""

    def __init__(self, invocation_id: str, storage: Any) -> None:
        self.invocation_id = invocation_id
        self.thread_local_storage = storage
        self.function_name = "fn"
        self.function_directory = ""


class Shipped(logging.Handler):
    """The worker's logging handler: each record with the id it can tie it to, asked in the
    thread that emits it."""

    def __init__(self, module: types.ModuleType) -> None:
        super().__init__(logging.INFO)
        self._module = module
        self.records: list[tuple[str, str | None]] = []
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        tag = self._module.get_current_invocation_id()
        with self._lock:
            self.records.append((record.getMessage(), tag))


class Worker:
    """One worker process: the dispatcher module (installed in sys.modules under its name for
    as long as the worker runs), its event loop and its sync executor."""

    def __init__(self) -> None:
        self.module = dispatcher_module()
        self.shipped = Shipped(self.module)
        self._previous = sys.modules.get(MODULE)
        sys.modules[MODULE] = self.module
        self.pool = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="worker-sync")
        self.loop = asyncio.new_event_loop()
        factory = self.module.ContextEnabledTask
        self.loop.set_task_factory(lambda loop, coro, context=None: factory(coro, loop, context))
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        root = logging.getLogger()
        self._level = root.level
        root.addHandler(self.shipped)
        root.setLevel(logging.INFO)  # the worker's root level (l. 191-194)

    def invoke(self, fn: Callable[..., Any], **args: Any) -> str:
        """One invocation request for `fn` (with `context` if its signature has one); returns
        the invocation id the host gave it. The function's exception propagates."""
        invocation_id = str(uuid.uuid4())
        local = self.module._invocation_id_local
        context = Context(invocation_id, local)
        if "context" in inspect.signature(fn).parameters:
            args["context"] = context

        def run_sync() -> Any:
            local.invocation_id = invocation_id
            try:
                return fn(**args)
            finally:
                local.invocation_id = None

        async def request() -> Any:
            task = asyncio.current_task()
            assert isinstance(task, self.module.ContextEnabledTask)
            setattr(task, ATTRIBUTE, invocation_id)
            local.invocation_id = invocation_id  # the loop thread's, never cleared
            if inspect.iscoroutinefunction(fn):
                return await fn(**args)
            return await self.loop.run_in_executor(self.pool, run_sync)

        asyncio.run_coroutine_threadsafe(request(), self.loop).result()
        return invocation_id

    def close(self) -> None:
        logging.getLogger().removeHandler(self.shipped)
        logging.getLogger().setLevel(self._level)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()
        self.pool.shutdown()
        if self._previous is None:
            sys.modules.pop(MODULE, None)
        else:
            sys.modules[MODULE] = self._previous
