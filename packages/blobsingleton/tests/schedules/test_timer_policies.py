"""A timer's ledger and its catch-up, overlap and lateness policies on the test kit's clock
(issue 49): the host's timer rules (`schedules`) name the occurrences, `memory_backends()`
keeps the records, `FakeClock` is the time. Every instance fires; each occurrence ends once."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import azure.functions as func
import pytest
from blobsingleton import Busy, once, timers
from blobsingleton.errors import OccurrenceRefused
from blobsingleton.testing import FakeClock, MemoryBackends, memory_backends, timer_request
from blobsingleton.timers import CatchUp, Outcome, Overlap, Timer, check, fire, ledger_of
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

NIGHTLY = "0 0 2 * * *"
NIGHT = [datetime(2026, 11, d, 2, tzinfo=UTC) for d in range(20, 27)]
INSTANCES = 3


@pytest.fixture
def memory() -> Iterator[MemoryBackends]:
    with memory_backends(FakeClock(NIGHT[0].timestamp())) as backends:
        yield backends


def at(memory: MemoryBackends, moment: datetime) -> None:
    memory.clock.now = moment.timestamp()


Runs = list[tuple[datetime, bool]]


def nightly(policy: Timer) -> tuple[Callable[[func.TimerRequest], Any], Runs]:
    runs: list[tuple[datetime, bool]] = []

    @once("night-{occurrence}", schedule=policy)
    def run(timer: func.TimerRequest) -> None:
        runs.append((next_of(timer), timer.past_due))

    return run, runs


def fire_everywhere(fn: Callable[[func.TimerRequest], Any], occurrence: datetime) -> None:
    """What the host does on every instance that fires `occurrence` (its schedule monitor's
    status names it)."""
    for _ in range(INSTANCES):
        fn(timer_request(occurrence, last=occurrence - timedelta(days=1)))


def downtime(memory: MemoryBackends, fn: Callable[[func.TimerRequest], Any]) -> None:
    """Night 0 runs; nights 1-3 pass with the app down; night 4 fires (seconds late)."""
    at(memory, NIGHT[0] + timedelta(seconds=1))
    fire_everywhere(fn, NIGHT[0])
    at(memory, NIGHT[4] + timedelta(seconds=2))
    fire_everywhere(fn, NIGHT[4])


def outcomes(fn: Callable[..., Any]) -> dict[int, Outcome]:
    ledger = ledger_of(fn)
    return {NIGHT.index(e.occurrence): e.outcome for e in ledger.entries if e.occurrence in NIGHT}


def iso(moment: datetime) -> datetime:
    return moment


def next_of(timer: func.TimerRequest) -> datetime:
    """The occurrence a firing's schedule status names (`Next`)."""
    text = str((timer.schedule_status or {})["Next"])  # type: ignore[attr-defined]
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_catch_up_each_runs_the_three_missed_nights_in_order_once(memory: MemoryBackends) -> None:
    fn, runs = nightly(Timer(NIGHTLY, catch_up=CatchUp.each(within=timedelta(days=4))))
    downtime(memory, fn)
    assert runs == [
        (iso(NIGHT[0]), False), (iso(NIGHT[1]), True), (iso(NIGHT[2]), True),
        (iso(NIGHT[3]), True), (iso(NIGHT[4]), False),
    ]  # fmt: skip
    assert outcomes(fn) == {0: Outcome.RAN, 1: Outcome.CAUGHT_UP, 2: Outcome.CAUGHT_UP,
                            3: Outcome.CAUGHT_UP, 4: Outcome.RAN}  # fmt: skip


def test_catch_up_latest_runs_one_and_records_the_others_missed(memory: MemoryBackends) -> None:
    fn, runs = nightly(Timer(NIGHTLY, catch_up=CatchUp.latest(within=timedelta(days=4))))
    downtime(memory, fn)
    assert runs == [(iso(NIGHT[0]), False), (iso(NIGHT[3]), True), (iso(NIGHT[4]), False)]
    assert outcomes(fn) == {0: Outcome.RAN, 1: Outcome.MISSED, 2: Outcome.MISSED,
                            3: Outcome.CAUGHT_UP, 4: Outcome.RAN}  # fmt: skip


def test_catch_up_none_records_three_misses(
    memory: MemoryBackends, caplog: pytest.LogCaptureFixture
) -> None:
    fn, runs = nightly(Timer(NIGHTLY, catch_up=CatchUp.none()))
    with caplog.at_level(logging.INFO, logger="blobsingleton.events"):
        downtime(memory, fn)
    missed = [r.getMessage() for r in caplog.records if "event=timer_missed" in r.getMessage()]
    assert len(missed) == 3  # each recorded once, by one of the instances that fired
    assert all(r.levelno == logging.WARNING for r in caplog.records
               if "event=timer_missed" in r.getMessage())  # fmt: skip
    assert runs == [(iso(NIGHT[0]), False), (iso(NIGHT[4]), False)]
    assert outcomes(fn) == {0: Outcome.RAN, 1: Outcome.MISSED, 2: Outcome.MISSED,
                            3: Outcome.MISSED, 4: Outcome.RAN}  # fmt: skip
    ledger = ledger_of(fn).to_dict()
    assert ledger["missed"] == ["2026-11-21T02:00:00Z", "2026-11-22T02:00:00Z",
                                "2026-11-23T02:00:00Z"]  # fmt: skip


def test_the_window_bounds_catch_ups(memory: MemoryBackends) -> None:
    """Each within one day: only night 3 (26 h before night 4 fires? no: 24 h) is inside."""
    fn, runs = nightly(Timer(NIGHTLY, catch_up=CatchUp.each(within=timedelta(hours=25))))
    downtime(memory, fn)
    assert [r[0] for r in runs] == [iso(NIGHT[0]), iso(NIGHT[3]), iso(NIGHT[4])]
    assert outcomes(fn)[1] == outcomes(fn)[2] == Outcome.MISSED


def test_the_default_is_the_hosts_nothing_run_and_the_gap_shown_late(
    memory: MemoryBackends,
) -> None:
    fn, runs = nightly(Timer(NIGHTLY))
    downtime(memory, fn)
    assert [r[0] for r in runs] == [iso(NIGHT[0]), iso(NIGHT[4])]
    assert outcomes(fn) == {0: Outcome.RAN, 1: Outcome.LATE, 2: Outcome.LATE,
                            3: Outcome.LATE, 4: Outcome.RAN}  # fmt: skip
    assert not ledger_of(fn).late  # it fires again: nothing late after the last run
    assert ledger_of(fn).to_dict()["missed"] == ["2026-11-21T02:00:00Z", "2026-11-22T02:00:00Z",
                                                 "2026-11-23T02:00:00Z"]  # fmt: skip


def test_a_plain_schedule_has_a_ledger_too(memory: MemoryBackends) -> None:
    runs: list[str] = []

    @once("plain-{occurrence}", schedule=NIGHTLY)
    def plain(timer: func.TimerRequest) -> None:
        runs.append("ran")

    at(memory, NIGHT[0] + timedelta(seconds=1))
    plain(timer_request(NIGHT[0]))
    assert ledger_of(plain).last_run is not None


def test_the_hosts_past_due_run_under_none_is_recorded_missed_not_run(
    memory: MemoryBackends,
) -> None:
    """The host's start-up run of a missed night (IsPastDue, Next = that night) is refused."""
    fn, runs = nightly(Timer(NIGHTLY, catch_up=CatchUp.none()))
    at(memory, NIGHT[0] + timedelta(seconds=1))
    fn(timer_request(NIGHT[0]))
    at(memory, NIGHT[1] + timedelta(hours=5))
    fn(timer_request(NIGHT[1], past_due=True))
    assert [r[0] for r in runs] == [iso(NIGHT[0])]
    assert outcomes(fn)[1] == Outcome.MISSED


def test_a_timer_whose_host_stopped_firing_is_reported_late(
    memory: MemoryBackends, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Night 0 ran; the host fires no more. Another instance's check (or the ops endpoint's)
    names the function and each late night: an event record and the gauge."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    gauge = provider.get_meter("blobsingleton").create_gauge("blobsingleton.timer.late")
    monkeypatch.setattr(timers, "LATE", gauge)  # the SDK's reader behind the library's gauge
    fn, _ = nightly(Timer(NIGHTLY, grace=timedelta(minutes=5)))
    at(memory, NIGHT[0] + timedelta(seconds=1))
    fire_everywhere(fn, NIGHT[0])
    at(memory, NIGHT[1] + timedelta(minutes=4))
    assert not check(fn)[0].late  # within the grace period
    at(memory, NIGHT[2] + timedelta(minutes=6))
    with caplog.at_level(logging.INFO, logger="blobsingleton.events"):
        ledger = check(fn)[0]
    assert [e.occurrence for e in ledger.late] == [NIGHT[1], NIGHT[2]]
    assert ledger.to_dict()["late"] is True
    records = [r.getMessage() for r in caplog.records if "event=timer_late" in r.getMessage()]
    assert len(records) == 2
    assert "occurrence=2026-11-21T02:00:00Z" in records[0]
    assert "function=" in records[0]
    data = reader.get_metrics_data()
    assert data is not None
    points = [p for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
              for p in m.data.data_points]  # type: ignore[union-attr]  # fmt: skip
    assert [(p.value, dict(p.attributes or {})) for p in points] == [
        (2, {"function": ledger.function})
    ]


def test_overlap_skip_records_an_occurrence_due_while_the_last_runs(
    memory: MemoryBackends,
) -> None:
    """Every 10 s; the 10:00:00 run takes longer than 10 s: 10:00:10's firing (another
    instance) is recorded skipped, never run, and 10:00:20's runs."""
    started, release = threading.Event(), threading.Event()
    runs: list[datetime] = []

    @once("sweep-{occurrence}", schedule=Timer("*/10 * * * * *", overlap=Overlap.skip()),
          busy=Busy.skip())  # fmt: skip
    def sweep(timer: func.TimerRequest) -> None:
        runs.append(next_of(timer))
        if len(runs) == 1:
            started.set()
            assert release.wait(10)

    ten = datetime(2026, 11, 20, 10, tzinfo=UTC)
    at(memory, ten + timedelta(seconds=1))
    first = threading.Thread(target=sweep, args=(timer_request(ten),))
    first.start()
    assert started.wait(10)
    at(memory, ten + timedelta(seconds=11))
    assert sweep(timer_request(ten + timedelta(seconds=10))) is None
    release.set()
    first.join(10)
    at(memory, ten + timedelta(seconds=21))
    sweep(timer_request(ten + timedelta(seconds=20)))
    assert runs == [iso(ten), iso(ten + timedelta(seconds=20))]
    entries = {e.occurrence: e for e in ledger_of(sweep).entries}
    assert entries[ten + timedelta(seconds=10)].outcome == Outcome.SKIPPED
    assert "still running" in (entries[ten + timedelta(seconds=10)].reason or "")
    assert ledger_of(sweep).to_dict()["skipped"] == ["2026-11-20T10:00:10Z"]


def test_overlap_buffer_all_runs_the_next_after_the_last(memory: MemoryBackends) -> None:
    started, release = threading.Event(), threading.Event()
    runs: list[datetime] = []
    running = threading.Semaphore(1)

    @once("buffered-{occurrence}", schedule=Timer("*/10 * * * * *",
          overlap=Overlap.buffer_all(timeout=10)))  # fmt: skip
    def sweep(timer: func.TimerRequest) -> None:
        assert running.acquire(blocking=False), "two runs at once"
        try:
            runs.append(next_of(timer))
            if len(runs) == 1:
                started.set()
                assert release.wait(10)
        finally:
            running.release()

    ten = datetime(2026, 11, 20, 10, tzinfo=UTC)
    at(memory, ten + timedelta(seconds=1))
    first = threading.Thread(target=sweep, args=(timer_request(ten),))
    first.start()
    assert started.wait(10)
    at(memory, ten + timedelta(seconds=11))
    second = threading.Thread(target=sweep, args=(timer_request(ten + timedelta(seconds=10)),))
    second.start()
    release.set()
    first.join(10)
    second.join(10)
    assert runs == [iso(ten), iso(ten + timedelta(seconds=10))]


def test_an_http_call_and_the_timer_run_one_occurrence_once(memory: MemoryBackends) -> None:
    fn, runs = nightly(Timer(NIGHTLY, catch_up=CatchUp.latest(within=timedelta(days=1))))
    at(memory, NIGHT[0] + timedelta(seconds=30))
    fire(fn)  # the external scheduler's call first: the latest due occurrence
    fire_everywhere(fn, NIGHT[0])  # then every instance's timer: replays
    assert runs == [(iso(NIGHT[0]), False)]


def test_a_late_http_call_is_a_catch_up_inside_the_window_and_refused_outside(
    memory: MemoryBackends,
) -> None:
    fn, runs = nightly(Timer(NIGHTLY, catch_up=CatchUp.latest(within=timedelta(days=1))))
    at(memory, NIGHT[2] + timedelta(hours=3))
    fire(fn, NIGHT[2])
    assert runs == [(iso(NIGHT[2]), True)]
    assert outcomes(fn)[2] == Outcome.CAUGHT_UP
    with pytest.raises(OccurrenceRefused, match="outside the catch-up window"):
        fire(fn, NIGHT[0])
    with pytest.raises(OccurrenceRefused, match="not an occurrence"):
        fire(fn, NIGHT[1] + timedelta(minutes=1))
    with pytest.raises(OccurrenceRefused, match="not due yet"):
        fire(fn, NIGHT[3])


def test_reading_a_ledger_costs_one_listing(memory: MemoryBackends) -> None:
    fn, _ = nightly(Timer(NIGHTLY, catch_up=CatchUp.none()))
    downtime(memory, fn)
    ledger = ledger_of(fn)
    assert ledger.requests <= 2
    assert len(ledger.entries) >= 5


def test_an_async_timer_catches_up_each_in_order_off_the_loop(memory: MemoryBackends) -> None:
    runs: list[tuple[datetime, bool]] = []

    @once("async-{occurrence}",
          schedule=Timer(NIGHTLY, catch_up=CatchUp.each(within=timedelta(days=4)),
                         overlap=Overlap.skip()))  # fmt: skip
    async def night(timer: func.TimerRequest) -> None:
        await asyncio.sleep(0)
        runs.append((next_of(timer), timer.past_due))

    at(memory, NIGHT[0] + timedelta(seconds=1))
    asyncio.run(night(timer_request(NIGHT[0])))
    at(memory, NIGHT[4] + timedelta(seconds=2))
    for _ in range(INSTANCES):
        asyncio.run(night(timer_request(NIGHT[4])))
    assert runs == [(NIGHT[0], False), (NIGHT[1], True), (NIGHT[2], True), (NIGHT[3], True),
                    (NIGHT[4], False)]  # fmt: skip
    lock = memory.lock_name(night, "timer-overlap")
    assert memory.locks.locks[lock].token == 1 + INSTANCES  # taken by every firing
    assert not memory.locks.leased(lock)  # and given back
