"""Blocking calls off the event loop: run in a thread, their log records emitted in the awaiting
task, and what a cancelled call took given back."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from blobsingleton._log_capture import captured_logs, emit_captured

T = TypeVar("T")


class _Handoff(Generic[T]):
    """Who owns a threaded call's result: the awaiting task, or, once it is gone, the thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._abandoned = False
        self._finished = False
        self.result: T | None = None

    def finish(self, result: T) -> bool:
        """Thread side: True while the task still takes the result."""
        with self._lock:
            self._finished, self.result = True, result
            return not self._abandoned

    def abandon(self) -> bool:
        """Task side (cancelled): True when the call already finished and its result is ours."""
        with self._lock:
            self._abandoned = True
            return self._finished


async def off_loop(call: Callable[[], T], undo: Callable[[T], None] | None = None) -> T:
    """Run `call` in a thread, its log records emitted here; if the task is cancelled, `call`
    still runs to its end and `undo(result)` gives back what it took, off the loop."""
    loop = asyncio.get_running_loop()
    handoff: _Handoff[T] = _Handoff()
    records: list[logging.LogRecord] = []
    context = contextvars.copy_context()

    def run() -> T:
        with captured_logs(records):
            result = context.run(call)
        if not handoff.finish(result):
            emit_captured(records)  # the task is gone: better without an invocation id than lost
            if undo is not None:
                undo(result)
        return result

    future = loop.run_in_executor(None, run)
    try:
        result = await asyncio.shield(future)
    except asyncio.CancelledError:
        if handoff.abandon() and undo is not None:
            finished: T = handoff.result  # type: ignore[assignment]
            threading.Thread(
                target=undo, args=(finished,), name="blobsingleton-undo", daemon=True
            ).start()
        raise
    except BaseException:
        emit_captured(records)
        raise
    emit_captured(records)
    return result
