"""The library's log records held back in a thread that captures them, for the thread or task
the worker can name to emit (`_off_loop`)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

_library_log = logging.getLogger("blobsingleton")

_capture = threading.local()


class _CaptureInThisThread(logging.Filter):
    """Hold back the library's records in threads that capture them, for the owner to emit."""

    def filter(self, record: logging.LogRecord) -> bool:
        target: list[logging.LogRecord] | None = getattr(_capture, "records", None)
        if target is None or getattr(record, "_blobsingleton_emitting", False):
            return True
        target.append(record)
        return False


# Filters of a logger do not apply to its children's records: every library logger gets one.
for _name in ("blobsingleton", "blobsingleton.events"):
    logging.getLogger(_name).addFilter(_CaptureInThisThread())


@contextlib.contextmanager
def captured_logs(into: list[logging.LogRecord]) -> Iterator[None]:
    """In this thread, append the library's records to `into` instead of emitting them."""
    previous = getattr(_capture, "records", None)
    _capture.records = into
    try:
        yield
    finally:
        _capture.records = previous


def emit_captured(records: list[logging.LogRecord]) -> None:
    """Emit captured records from the calling thread or task (the one the worker can name)."""
    while records:
        record = records.pop(0)
        setattr(record, "_blobsingleton_emitting", True)  # noqa: B010 - not a LogRecord field
        _library_log.handle(record)
