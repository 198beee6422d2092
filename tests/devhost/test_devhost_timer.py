"""Timer trigger: the schedule monitor's one catch-up run, and the listener lease (`once`)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from devhost_testkit import Records, StorageHelper, wait_for


def _status_blob(storage: StorageHelper, host_id: str) -> Any:
    return storage.blobs.get_blob_client(
        "azure-webjobs-hosts", f"timers/{host_id}/sample_timer/status"
    )


def test_a_past_due_schedule_runs_once_with_past_due(
    start_host: Any, base_settings: dict[str, Any], storage: StorageHelper, records: Records
) -> None:
    host_id = base_settings["AzureFunctionsWebHost__hostid"]
    with __import__("contextlib").suppress(Exception):
        storage.blobs.create_container("azure-webjobs-hosts")
    missed = datetime.now(UTC) - timedelta(hours=3)
    stored = {
        "Last": (missed - timedelta(days=365)).isoformat(),
        "Next": missed.isoformat(),
        "LastUpdated": (missed - timedelta(days=365)).isoformat(),
    }
    _status_blob(storage, host_id).upload_blob(json.dumps(stored), overwrite=True)

    host = start_host(base_settings, instances=1)  # schedule is yearly: only a catch-up fires
    wait_for(lambda: records.where(function="sample_timer"))
    time.sleep(1.0)
    host.stop()
    runs = records.where(function="sample_timer")
    assert len(runs) == 1
    assert runs[0]["past_due"] is True
    assert runs[0]["status"]["Next"] == stored["Next"]  # the function sees the stored status

    status = json.loads(_status_blob(storage, host_id).download_blob().readall())
    assert datetime.fromisoformat(status["Next"]) > datetime.now(UTC)
    assert datetime.fromisoformat(status["Last"]) > missed

    start_host(base_settings, instances=1)  # Next is in the future now: no second catch-up
    time.sleep(1.5)
    assert len(records.where(function="sample_timer")) == 1


def test_timers_once_fire_on_exactly_one_of_two_instances(
    start_host: Any, base_settings: dict[str, Any], records: Records
) -> None:
    settings = {**base_settings, "SAMPLE_SCHEDULE": "* * * * * *"}  # every second
    start_host(settings, instances=2, timers="once")
    wait_for(lambda: len(records.where(function="sample_timer")) >= 3, timeout=15)
    fired_on = {r["instance"] for r in records.where(function="sample_timer")}
    assert len(fired_on) == 1


def test_timers_every_fire_on_every_instance(
    start_host: Any, base_settings: dict[str, Any], records: Records
) -> None:
    settings = {**base_settings, "SAMPLE_SCHEDULE": "* * * * * *"}
    start_host(settings, instances=2, timers="every")
    wait_for(
        lambda: (
            {r["instance"] for r in records.where(function="sample_timer")}
            == {"devhost-0", "devhost-1"}
        ),
        timeout=15,
    )
