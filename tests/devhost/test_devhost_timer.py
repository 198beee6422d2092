"""Timer trigger: the schedule monitor's one catch-up run, the listener lease (`once`), and
the host's schedule rules (both passes of a repeated hour, the monitor off under a minute,
schedules NCrontab refuses) replayed on a simulated clock against Azurite."""

from __future__ import annotations

import json
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import azure.functions as func
import pytest
from blobsingleton.schedules import fired_occurrence
from devhost_testkit import Records, StorageHelper, wait_for

from devhost.host_config import HostConfig
from devhost.indexing import IndexedFunction, TimerTrigger
from devhost.instance import Instance
from devhost.request_counting import RequestCounter
from devhost.stats import WorkerStats
from devhost.timer_listener import TimerListener, _parse
from devhost.worker import WorkerConfig


def _status_blob(storage: StorageHelper, host_id: str) -> Any:
    return storage.blobs.get_blob_client(
        "azure-webjobs-hosts", f"timers/{host_id}/sample_timer/status"
    )


def _schedule_running(log_file: Any) -> bool:
    """Whether the timer listener logged that it made its start-up decision."""
    return log_file.exists() and "sample_timer: schedule running" in log_file.read_text()


def test_a_past_due_schedule_runs_once_with_past_due(
    start_host: Any,
    base_settings: dict[str, Any],
    storage: StorageHelper,
    records: Records,
    tmp_path: Any,
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

    first_log = tmp_path / "first.log"
    host = start_host(base_settings, instances=1, log_file=str(first_log))
    # The schedule is yearly: only a catch-up fires, before the listener says it is running.
    wait_for(lambda: _schedule_running(first_log))
    host.stop()
    runs = records.where(function="sample_timer")
    assert len(runs) == 1
    assert runs[0]["past_due"] is True
    assert runs[0]["status"]["Next"] == stored["Next"]  # the function sees the stored status

    status = json.loads(_status_blob(storage, host_id).download_blob().readall())
    assert datetime.fromisoformat(status["Next"]) > datetime.now(UTC)
    assert datetime.fromisoformat(status["Last"]) > missed

    second_log = tmp_path / "second.log"
    start_host(base_settings, instances=1, log_file=str(second_log))
    wait_for(lambda: _schedule_running(second_log))  # decided: Next is in the future now
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


# -- the host's schedule rules, replayed on a simulated clock ----------------------------------
class NightClock:
    """A clock that jumps ahead instead of waiting: a night replays in milliseconds."""

    def __init__(self, start: datetime) -> None:
        self.time = start

    def now(self) -> datetime:
        return self.time

    def wait(self, stop: threading.Event, seconds: float) -> None:
        self.time += timedelta(seconds=seconds)


class Firings:
    """What a timer function saw: when it ran, its status, the occurrence it stands for."""

    def __init__(self, schedule: str, clock: NightClock, wanted: int) -> None:
        self.schedule, self.clock, self.wanted = schedule, clock, wanted
        self.seen: list[tuple[datetime, Any, datetime]] = []
        self.enough = threading.Event()

    def record(self, timer: func.TimerRequest) -> None:
        now = self.clock.now()
        occurrence = fired_occurrence(self.schedule, timer.schedule_status, now)
        self.seen.append((now, timer.schedule_status, occurrence))
        if len(self.seen) >= self.wanted:
            self.enough.set()


def _replay(
    schedule: str, start: datetime, wanted: int, *, use_monitor: bool
) -> tuple[Firings, TimerListener]:
    clock = NightClock(start)
    firings = Firings(schedule, clock, wanted)

    def night_timer(timer: func.TimerRequest) -> None:
        firings.record(timer)

    function = IndexedFunction(
        name="night_timer",
        trigger=TimerTrigger(schedule=schedule, use_monitor=use_monitor),
        arg_name="timer",
        user_function=night_timer,
    )
    listener = TimerListener(function, RequestCounter(), WorkerStats(), "every", clock=clock)
    listener.start()
    assert firings.enough.wait(30)
    listener.stop()
    assert listener.drain(10)
    return firings, listener


@pytest.fixture
def pacific_host(connection_string: str, monkeypatch: pytest.MonkeyPatch) -> str:
    host_id = f"dst-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("AzureWebJobsStorage", connection_string)
    monkeypatch.setenv("AzureFunctionsWebHost__hostid", host_id)
    monkeypatch.setenv("WEBSITE_TIME_ZONE", "America/Los_Angeles")
    return host_id


#: 2018-11-04 in Los Angeles: 02:00 PDT falls back to 01:00 PST (CronScheduleTests' night).
FALL_BACK_NIGHT = datetime(2018, 11, 4, 7, 0, tzinfo=UTC)
BOTH_PASSES = [FALL_BACK_NIGHT.replace(hour=h, minute=30) for h in (7, 8, 9, 10, 11)]


def test_an_interval_fires_in_both_passes_of_the_repeated_hour_without_a_monitor(
    pacific_host: str,
) -> None:
    firings, _ = _replay("0 30 * * * *", FALL_BACK_NIGHT, 5, use_monitor=False)
    fired = firings.seen[:5]
    assert [when for when, _, _ in fired] == BOTH_PASSES  # 01:30 PDT and 01:30 PST
    assert [status for _, status, _ in fired] == [{}] * 5  # no status (`None` shows as {})
    assert [occurrence for _, _, occurrence in fired] == BOTH_PASSES


def test_an_interval_fires_in_both_passes_with_the_monitor_on_azurite(
    pacific_host: str, storage: StorageHelper
) -> None:
    firings, listener = _replay("0 30 * * * *", FALL_BACK_NIGHT, 5, use_monitor=True)
    fired = firings.seen[:5]
    assert [when for when, _, _ in fired] == BOTH_PASSES
    assert [_parse(status["Next"]) for _, status, _ in fired] == BOTH_PASSES
    assert [occurrence for _, _, occurrence in fired] == BOTH_PASSES
    blob = storage.blobs.get_blob_client(
        "azure-webjobs-hosts", f"timers/{pacific_host}/night_timer/status"
    )
    stored = json.loads(blob.download_blob().readall())
    assert _parse(stored["Next"]) == listener.schedule.next_after(_parse(stored["Last"]))


def test_a_point_in_time_fires_once_on_the_fall_back_night(pacific_host: str) -> None:
    start = datetime(2018, 11, 3, 7, 0, tzinfo=UTC)  # 2018-11-03 00:00 PDT
    firings, _ = _replay("0 30 1 * * *", start, 3, use_monitor=False)
    assert [when for when, _, _ in firings.seen[:3]] == [
        datetime(2018, 11, 3, 8, 30, tzinfo=UTC),  # 01:30 PDT
        datetime(2018, 11, 4, 8, 30, tzinfo=UTC),  # 01:30 PDT, not again at 01:30 PST
        datetime(2018, 11, 5, 9, 30, tzinfo=UTC),  # 01:30 PST
    ]


def test_the_monitor_is_off_for_a_schedule_under_a_minute(
    pacific_host: str, storage: StorageHelper
) -> None:
    firings, listener = _replay("*/10 * * * * *", FALL_BACK_NIGHT, 3, use_monitor=True)
    assert listener.monitor is None and listener.monitor_turned_off
    assert [status for _, status, _ in firings.seen[:3]] == [{}] * 3
    assert [when.second for when, _, _ in firings.seen[:3]] == [10, 20, 30]
    blob = storage.blobs.get_blob_client(
        "azure-webjobs-hosts", f"timers/{pacific_host}/night_timer/status"
    )
    assert not blob.exists()


def test_a_tab_separated_schedule_puts_the_function_in_error_with_the_hosts_message(
    connection_string: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AzureWebJobsStorage", connection_string)
    schedule = "0\t0\t2\t*\t*\t*"
    function = IndexedFunction(
        name="nightly_import",
        trigger=TimerTrigger(schedule=schedule),
        arg_name="timer",
        user_function=lambda timer: None,
    )
    instance = Instance(
        config=WorkerConfig(instance=0, http_port=None), functions=[function], host=HostConfig()
    )
    instance.start()
    assert instance.listeners == []
    assert instance.errors["nightly_import"].startswith(
        "Error indexing method 'Functions.nightly_import'. The schedule expression "
        f"'{schedule}' was not recognized as a valid cron expression or timespan string."
    )


@pytest.mark.parametrize(
    ("schedule", "use_monitor"),
    [("0 0 0 * * *", True), ("0 0 0 * * *", False), ("1.00:00:00", True)],
)
def test_a_firing_a_millisecond_early_is_not_followed_by_the_same_occurrence(
    schedule: str,
    use_monitor: bool,
    connection_string: str,
    monkeypatch: pytest.MonkeyPatch,
    storage: StorageHelper,
) -> None:
    """TimerListenerTests.InvokeJobFunction_UpdatesScheduleMonitor_AccountsForSkew: the run
    stands for Next, so Last = Next and the following Next is the day after."""
    host_id = f"skew-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("AzureWebJobsStorage", connection_string)
    monkeypatch.setenv("AzureFunctionsWebHost__hostid", host_id)
    due = datetime(2016, 3, 5, tzinfo=UTC)
    clock = NightClock(due - timedelta(milliseconds=1))
    seen: list[datetime] = []

    def skewed_timer(timer: func.TimerRequest) -> None:
        seen.append(fired_occurrence(schedule, timer.schedule_status, clock.now()))

    function = IndexedFunction(
        name="skewed_timer",
        trigger=TimerTrigger(schedule=schedule, use_monitor=use_monitor),
        arg_name="timer",
        user_function=skewed_timer,
    )
    listener = TimerListener(function, RequestCounter(), WorkerStats(), "every", clock=clock)
    listener._status = {"Last": "2016-03-04T00:00:00+00:00", "Next": "2016-03-05T00:00:00+00:00"}
    following = listener._fire(past_due=False, occurrence=due)
    assert following == datetime(2016, 3, 6, tzinfo=UTC)
    assert listener._status is not None
    assert (_parse(listener._status["Last"]), _parse(listener._status["Next"])) == (due, following)
    if schedule.startswith("0 "):
        assert seen == [due]  # the {occurrence} of the early run, with and without a status
    blob = storage.blobs.get_blob_client(
        "azure-webjobs-hosts", f"timers/{host_id}/skewed_timer/status"
    )
    assert blob.exists() is use_monitor
