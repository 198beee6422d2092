"""One lease handoff between two instances, the holder stopped as the Functions host stops a
Python worker (drain, then kill) or killed outright (a crash), timed from the records the
app writes (`harness/apps/handoff_app.py`).

Instance 0 takes the lease in an invocation that holds it for `hold` seconds; instance 1 gets
a message for the same key and polls for it; then instance 0 is stopped. The handoff is the
time from instance 0 returning (its release) to instance 1 holding the key, and from the
stop request to instance 1 holding it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from azure.core.exceptions import ResourceExistsError
from blobsingleton import StorageAccount

from devhost.app_settings import instance_id
from devhost.supervisor import HostOptions, Supervisor
from harness import kit

APP_DIR = str(Path(__file__).resolve().parent / "apps")


def _first(path: Path, event: str, instance: int) -> dict[str, Any] | None:
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        if entry["event"] == event and entry["instance"] == instance_id(instance):
            return dict(entry)
    return None


def _wait(predicate: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(f"no handoff within {timeout} s")


def _send(connection_string: str, queue: str, body: bytes) -> None:
    client = kit.queue_client(queue, StorageAccount(connection_string=connection_string))
    with contextlib.suppress(ResourceExistsError):
        client.create_queue()
    client.send_message(body)


def measure_handoff(
    connection_string: str,
    workdir: Path,
    *,
    kill: bool = False,
    hold: float = 2.0,
    settings: dict[str, str | None] | None = None,
) -> dict[str, Any]:
    """Run one handoff and return its timings and the stopped instance's exit code."""
    run = uuid.uuid4().hex[:8]
    records = workdir / f"handoff-{run}.jsonl"
    host = Supervisor(
        HostOptions(
            instances=2,
            app_module="handoff_app",
            app_dir=APP_DIR,
            settings={
                "AzureWebJobsStorage": connection_string,
                "LEASE_CONTAINER": f"handoff-{run}",
                "HOLD_SECONDS": str(hold),
                "HANDOFF_RECORD_FILE": str(records),
                "AzureFunctionsJobHost__extensions__queues__maxPollingInterval": "00:00:00.2",
                **(settings or {}),
            },
            instance_settings={"HANDOFF_QUEUE": f"handoff-{run}-{{instance}}"},
            http_port=None,
            drain_timeout=hold + 20,
            stats_interval=0.2,
            log_level=os.environ.get("HANDOFF_LOG_LEVEL", "WARNING"),
        )
    )
    with host:
        _send(connection_string, f"handoff-{run}-0", b"hold")
        _wait(lambda: _first(records, "acquired", 0), 30)
        _send(connection_string, f"handoff-{run}-1", b"wait")
        _wait(lambda: host.totals().in_flight == 2, 30)  # instance 1 polls for the key
        stop_requested = time.time()
        if kill:
            host._processes[0].kill()
            host._processes[0].join(10)
            exit_code = host._processes[0].exitcode
        else:
            exit_code = host.stop_instance(0)
        taker = _wait(lambda: _first(records, "acquired", 1), 90)
        released = _first(records, "returning", 0)
    return {
        "path": "killed (crash)" if kill else "host stop (drain, then kill)",
        "exit_code": exit_code,
        "released": released is not None,
        "handoff_after_release_s": round(taker["at"] - released["at"], 3) if released else None,
        "handoff_after_stop_request_s": round(taker["at"] - stop_requested, 3),
    }
