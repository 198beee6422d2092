"""GET /api/timers and `python -m shared.ops timers` (issue 49): each timer's ledger, read from
its run-once records on Azurite; a timer whose host stopped firing shows late, with its
missed nights, and is reported (an `event=timer_late` record) by whoever asks."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
from blobsingleton.config import scope_of
from blobsingleton.records import BlobRecordStore, Record, Status
from blobsingleton.schedules import previous_occurrence
from blobsingleton.timers import catch_up_timer

from functions import imports, jobs
from functions import ops as api
from tests.ops.support import OpsEnv, call
from tests.support import ROOT, AppSettings, child_env

SCHEDULES = {"IMPORT_SCHEDULE": "0 0 2 * * *", "JOB_WATCH_SCHEDULE": "*/30 * * * * *"}


def ran_nights_ago(nights: int) -> datetime:
    """What a run of the nightly fan-out `nights` nights ago left: its completed record."""
    night = previous_occurrence(SCHEDULES["IMPORT_SCHEDULE"], datetime.now(UTC))
    night -= timedelta(days=nights)
    started = night.timestamp() + 3
    BlobRecordStore(scope=scope_of(imports.fan_out_night)).put_if_absent(Record(
        key=f"nightly-import-{night:%Y-%m-%dT%H:%M:%SZ}", status=Status.COMPLETED,
        started_at=started, expires_at=time.time() + 3600, owner="instance-7", ttl=3600,
    ))  # fmt: skip
    return night


@pytest.fixture
def timers_env(ops_env: OpsEnv, app_settings: AppSettings) -> OpsEnv:
    app_settings.set(SCHEDULES)
    return ops_env


def test_a_timer_whose_host_stopped_firing_is_late_with_its_missed_nights(
    timers_env: OpsEnv, caplog: pytest.LogCaptureFixture
) -> None:
    last = ran_nights_ago(3)
    watched = previous_occurrence(SCHEDULES["JOB_WATCH_SCHEDULE"], datetime.now(UTC))
    jobs.sweep(catch_up_timer(watched, past_due=False))
    with caplog.at_level(logging.INFO, logger="blobsingleton.events"):
        status, body = call(api.ops_timers)
    assert status == 200
    nightly, watcher = body["items"]
    assert nightly["function"] == "fan_out_night" and nightly["schedule"] == "0 0 2 * * *"
    assert nightly["last_run"]["occurrence"] == f"{last:%Y-%m-%dT%H:%M:%SZ}"
    assert (
        nightly["last_run"]["outcome"] == "ran" and nightly["last_run"]["instance"] == "instance-7"
    )
    assert nightly["late"] is True
    missed = [f"{last + timedelta(days=d):%Y-%m-%dT%H:%M:%SZ}" for d in (1, 2, 3)]
    assert nightly["missed"] == missed and nightly["skipped"] == []
    assert nightly["next_due"] == f"{last + timedelta(days=4):%Y-%m-%dT%H:%M:%SZ}"
    late = [r.getMessage() for r in caplog.records if "event=timer_late" in r.getMessage()]
    assert [m for m in late if "function=fan_out_night" in m and missed[0] in m]
    assert watcher["function"] == "sweep" and watcher["late"] is False
    assert watcher["last_run"]["occurrence"] == f"{watched:%Y-%m-%dT%H:%M:%SZ}"


def test_timers_needs_the_read_role(timers_env: OpsEnv) -> None:
    status, _ = call(api.ops_timers, headers={})
    assert status in (401, 403)


def test_the_cli_lists_the_timers(timers_env: OpsEnv) -> None:
    last = ran_nights_ago(1)
    found = subprocess.run(
        [sys.executable, "-m", "shared.ops", "timers", "--json"], capture_output=True,
        text=True, env=child_env(), timeout=60, cwd=ROOT, check=False,
    )  # fmt: skip
    assert found.returncode == 0, found.stderr
    nightly = json.loads(found.stdout)["items"][0]
    assert nightly["last_run"]["occurrence"] == f"{last:%Y-%m-%dT%H:%M:%SZ}"
    table = subprocess.run(
        [sys.executable, "-m", "shared.ops", "timers"], capture_output=True, text=True,
        env=child_env(), timeout=60, cwd=ROOT, check=False,
    )  # fmt: skip
    assert table.stdout.split()[:7] == ["FUNCTION", "SCHEDULE", "LAST_RUN", "NEXT_DUE", "LATE",
                                        "MISSED", "SKIPPED"]  # fmt: skip
    assert "fan_out_night" in table.stdout
