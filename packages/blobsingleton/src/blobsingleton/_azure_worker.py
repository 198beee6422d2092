"""Every internal of Microsoft's Python worker the library reads, each with a fallback
(docs/internals.md).

The worker (azure-functions-python-worker) ties a log record to an invocation with
`get_current_invocation_id()` of its `dispatcher` module: the running task's
`__azure_function_invocation_id__` attribute, else the `invocation_id` of the thread-local
`_invocation_id_local` (which is also every `context.thread_local_storage`). It knows the id
whether or not the function takes `context`; the public API (`context.invocation_id`,
`context.thread_local_storage`) exists only when it does. The dispatcher is read where the
worker process loaded it (`sys.modules`), never imported: outside a worker there is none.
"""

from __future__ import annotations

import logging
import sys
from types import ModuleType
from typing import Any

log = logging.getLogger("blobsingleton")

#: The worker's dispatcher module: worker 4.x (Python 3.7-3.12) first, then the proxy worker
#: of Python 3.13+, whose `get_current_invocation_id` has the same name but answers the last
#: invocation the process received before the task's or thread's (workers/proxy_worker/
#: dispatcher.py): what it ships records with, so what they should say.
DISPATCHER_MODULES = ("azure_functions_worker.dispatcher", "proxy_worker.dispatcher")


def dispatcher() -> ModuleType | None:
    """The worker's dispatcher module, when this process is a worker (or emulates one)."""
    for name in DISPATCHER_MODULES:
        module = sys.modules.get(name)
        if module is not None:
            return module
    return None


_warned = False


def _changed(module: ModuleType, problem: str) -> None:
    """Say once that this worker's internals are not what the library reads."""
    global _warned
    if not _warned:
        _warned = True
        log.warning(
            "%s %s: the library's records of functions without `context` carry no invocation "
            "id (blobsingleton._azure_worker reads it there; `context.invocation_id` still "
            "ties the others)", module.__name__, problem,
        )  # fmt: skip


def current_invocation_id() -> str | None:
    """The id the worker attaches to a record logged here now, or None (no worker, or no
    invocation here). A worker without the function is warned about once."""
    module = dispatcher()
    if module is None:
        return None
    getter = getattr(module, "get_current_invocation_id", None)
    if not callable(getter):
        _changed(module, "has no get_current_invocation_id()")
        return None
    try:
        value = getter()
    except Exception as error:  # its internals changed shape: no id rather than a failed call
        _changed(module, f"get_current_invocation_id() failed ({type(error).__name__})")
        return None
    return str(value) if value else None


def thread_local_storage() -> Any | None:
    """The worker's thread-local that `get_current_invocation_id` falls back to (the object
    every `context.thread_local_storage` is), or None."""
    return getattr(dispatcher(), "_invocation_id_local", None)
