"""A child process: the first call of `@singleton("{account}")` (default busy) in a fresh
process, traced with `sys.settrace` from the call to its first storage request; prints one
JSON line: the library files and lines run, the requests the call sent, and what they were.

usage: walk_singleton.py ACCOUNT (AzureWebJobsStorage and LEASE_CONTAINER set, and the site's
name and instance id as Azure sets them; the key's lock blob made beforehand, so the call is
the steady state's)
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import blobsingleton
from blobsingleton import singleton
from blobsingleton.config import set_client_options

LIBRARY = str(Path(blobsingleton.__file__).resolve().parent)
lines: set[tuple[str, int]] = set()
requests: list[str] = []
tracing = threading.Event()


def on_request(request: Any) -> None:
    """Every request the library sends, first the one that ends the trace."""
    tracing.clear()
    http = request.http_request
    query = http.url.partition("?")[2]
    action = http.headers.get("x-ms-lease-action")
    requests.append(" ".join(part for part in (http.method, action, query) if part))


def traced(frame: FrameType, event: str, arg: object) -> Any:
    if not tracing.is_set():
        return None
    if not frame.f_code.co_filename.startswith(LIBRARY):
        return None  # not the library's: its own calls get their own "call" event
    lines.add((frame.f_code.co_filename, frame.f_lineno))
    return line_in_library


def line_in_library(frame: FrameType, event: str, arg: object) -> Any:
    if tracing.is_set() and event == "line":
        lines.add((frame.f_code.co_filename, frame.f_lineno))
    return line_in_library if tracing.is_set() else None


def main() -> None:
    set_client_options(raw_request_hook=on_request)

    @singleton("{account}")
    def work(account: str) -> None: ...

    tracing.set()
    sys.settrace(traced)
    try:
        work(sys.argv[1])
    finally:
        sys.settrace(None)
        tracing.clear()
    files = sorted({Path(name).relative_to(LIBRARY).as_posix() for name, _ in lines})
    print(json.dumps({"files": files, "lines": len(lines), "requests": requests}))


if __name__ == "__main__":
    main()
