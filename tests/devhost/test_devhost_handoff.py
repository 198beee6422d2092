"""Stopping a worker the way the Functions host does, while it holds a lease (issue 13 §1).

The host drains (listeners stopped, in-flight invocations finish) and then kills the Python
worker process: no WorkerTerminate, no signal the app sees, no atexit. What hands the lease
over is the release at the end of the invocation, during the drain; the waiting instance
then takes it at its next poll (the library polls every 1 s, jittered 0.5x to 1.5x).
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

from devhost_testkit import wait_for

from devhost.supervisor import HostOptions, Supervisor

APPS = Path(__file__).resolve().parent / "apps"
POLL_INTERVAL = 1.0  # blobsingleton's default
LEASE_PERIOD = 15.0


def events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def first(path: Path, event: str, instance: str) -> dict[str, Any] | None:
    found = [e for e in events(path) if e["event"] == event and e["instance"] == instance]
    return found[0] if found else None


def test_a_worker_stopped_as_the_host_stops_it_hands_its_lease_over_within_a_poll(
    base_settings: dict[str, Any], storage: Any, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    record_file = tmp_path / "handoff.jsonl"
    settings = {
        **base_settings,
        "HOLD_SECONDS": "2",
        "HANDOFF_RECORD_FILE": str(record_file),
    }
    host = Supervisor(
        HostOptions(
            instances=2,
            app_module="handoff_app",
            app_dir=str(APPS),
            settings=settings,
            instance_settings={"HANDOFF_QUEUE": f"handoff-{run}-{{instance}}"},
            http_port=None,
            drain_timeout=20.0,
            stats_interval=0.2,
        )
    )
    with host:
        storage.queue(f"handoff-{run}-0").send_message(b"hold")
        holder = wait_for(lambda: first(record_file, "acquired", "devhost-0"))
        storage.queue(f"handoff-{run}-1").send_message(b"wait")
        wait_for(lambda: host.totals().in_flight == 2)  # instance 1 is polling for the lease
        stop_requested = time.time()
        exit_code = host.stop_instance(0)
        taker = wait_for(lambda: first(record_file, "acquired", "devhost-1"), timeout=30)
        released = first(record_file, "returning", "devhost-0")
    assert exit_code == -9  # drained, then killed: the host's Process.Kill
    assert released is not None and released["at"] > holder["at"]
    handoff = taker["at"] - released["at"]
    print(
        json.dumps(
            {
                "handoff_after_release_s": round(handoff, 3),
                "handoff_after_stop_request_s": round(taker["at"] - stop_requested, 3),
            }
        )
    )
    assert handoff <= 1.5 * POLL_INTERVAL + 0.5  # the next jittered poll, plus its request
    assert handoff < LEASE_PERIOD / 3  # released, not left to expire


def test_a_worker_that_dies_is_replaced_and_the_replacement_takes_work(
    start_host: Any, base_settings: dict[str, Any], storage: Any, records: Any, caplog: Any
) -> None:
    """As the host starts a new language worker when one exits unexpectedly."""
    host = start_host(base_settings, restart=True)
    first_pid = host._processes[0].pid
    os.kill(first_pid, signal.SIGKILL)
    wait_for(lambda: host.restarts() == {0: 1} and host.alive() == [0])
    assert host._processes[0].pid != first_pid
    assert any("instance 0 exited (code -9): restarting it" in m for m in caplog.messages)
    storage.queue(base_settings["SAMPLE_QUEUE"]).send_message(b"after-restart")
    wait_for(lambda: records.where(function="sample_queue", event="done", body="after-restart"))
