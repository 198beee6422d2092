"""Functions that report what the worker gives them: context, threads, loops and log records.

Each appends what it saw to OBSERVED (the tests call them in-process through devhost's
invocation path).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import azure.functions as func
from blobsingleton import Busy, once, singleton

app = func.FunctionApp()
log = logging.getLogger("invocation_app")
OBSERVED: list[dict[str, Any]] = []


def _observe(context: func.Context, **fields: Any) -> None:
    OBSERVED.append(
        {
            "invocation_id": context.invocation_id,
            "function_name": context.function_name,
            "function_directory": context.function_directory,
            "trace_parent": context.trace_context.trace_parent,
            "retry": (context.retry_context.retry_count, context.retry_context.max_retry_count),
            "thread": threading.current_thread().name,
            **fields,
        }
    )


@app.queue_trigger(arg_name="msg", queue_name="observed", connection="AzureWebJobsStorage")
def sync_observer(msg: func.QueueMessage, context: func.Context) -> None:
    log.info("from the function's thread")
    started = threading.Thread(target=lambda: log.info("from a thread the function started"))
    started.start()
    started.join()
    _observe(context, message_id=msg.id)


@app.queue_trigger(arg_name="msg", queue_name="observed-async", connection="AzureWebJobsStorage")
async def async_observer(msg: func.QueueMessage, context: func.Context) -> None:
    log.info("from the function's task")
    await asyncio.to_thread(log.info, "from asyncio.to_thread")
    _observe(context, loop=id(asyncio.get_running_loop()))


@app.queue_trigger(arg_name="msg", queue_name="observed-once", connection="AzureWebJobsStorage")
@once("observed-{msg.id}")
async def async_once_observer(msg: func.QueueMessage, context: func.Context) -> None:
    _observe(context)


@app.queue_trigger(arg_name="msg", queue_name="observed-lease", connection="AzureWebJobsStorage")
@singleton("observed-lease")
def singleton_observer(msg: func.QueueMessage, context: func.Context) -> None:
    _observe(context)


@app.queue_trigger(arg_name="msg", queue_name="observed-defer", connection="AzureWebJobsStorage")
@singleton("observed-defer", scope="app", busy=Busy.defer(queue="observed-defer"))
async def async_defer_observer(msg: func.QueueMessage) -> None:
    """Takes no `context`: the library cannot tag its threads, only emit from the task."""
