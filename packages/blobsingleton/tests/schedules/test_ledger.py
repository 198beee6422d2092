"""The ledger's reading of occurrences (issue 49): the calendar buckets one listing covers,
the keys it maps back to occurrences, and the host's own occurrences kept across clock changes
and in schedules with seconds (the NCrontab and host-rule tests cover the schedules)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import azure.functions as func
import pytest
from blobsingleton import once
from blobsingleton._ledger import Keys, buckets
from blobsingleton.testing import FakeClock, MemoryBackends, memory_backends, timer_request
from blobsingleton.timers import CatchUp, Outcome, Timer, ledger_of


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("since", "until", "expected"),
    [
        (utc(2026, 11, 28, 5, 1), utc(2026, 11, 28, 5, 59), ["2026-11-28T05"]),
        (utc(2026, 12, 31, 23, 30), utc(2027, 1, 1, 0, 10), ["2026-12-31T23", "2027-01-01T00"]),
        (utc(2026, 11, 28, 1), utc(2026, 11, 28, 5), ["2026-11-28"]),
        (utc(2026, 11, 27, 5), utc(2026, 11, 28, 4), ["2026-11-27", "2026-11-28"]),
        (utc(2026, 11, 20), utc(2026, 11, 28), ["2026-11"]),
        (utc(2026, 11, 25), utc(2026, 12, 3), ["2026-11", "2026-12"]),
        (utc(2026, 12, 25), utc(2027, 1, 2), ["2026-12", "2027-01"]),
        (utc(2026, 6, 1), utc(2027, 3, 1), ["2026", "2027"]),
        (utc(2024, 1, 1), utc(2026, 1, 1), [""]),
    ],
)
def test_a_window_is_one_or_two_calendar_buckets(
    since: datetime, until: datetime, expected: list[str]
) -> None:
    assert buckets(since, until) == expected


def test_keys_name_occurrences_and_refuse_other_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOB", "nightly")
    keys = Keys.of("%JOB%-{occurrence}-v2")
    assert keys.key(utc(2026, 11, 28, 2)) == "nightly-2026-11-28T02:00:00Z-v2"
    assert keys.occurrence("nightly-2026-11-28T02:00:00Z-v2") == utc(2026, 11, 28, 2)
    assert keys.occurrence("nightly-garbage-v2") is None
    with pytest.raises(ValueError, match="another field"):
        Keys.of("{account}-{occurrence}")
    with pytest.raises(ValueError, match="another field"):

        @once("{account}-{occurrence}", schedule=Timer("0 0 2 * * *", catch_up=CatchUp.none()))
        def refused(timer: func.TimerRequest, account: str) -> None: ...


def test_policies_are_values_checked_when_made() -> None:
    with pytest.raises(ValueError, match="at least 0"):
        CatchUp.each(within=-1)
    with pytest.raises(TypeError, match="CatchUp"):
        Timer("0 0 2 * * *", catch_up="none")  # type: ignore[arg-type]


@pytest.fixture
def amsterdam(monkeypatch: pytest.MonkeyPatch) -> Iterator[MemoryBackends]:
    monkeypatch.setenv("WEBSITE_TIME_ZONE", "Europe/Amsterdam")
    with memory_backends(FakeClock(utc(2026, 3, 20).timestamp())) as memory:
        yield memory


def fired(memory: MemoryBackends, fn: object, moment: datetime) -> None:
    """The host fires at `moment` (no schedule monitor: the occurrence is read from the time)."""
    memory.clock.now = (moment + timedelta(milliseconds=300)).timestamp()
    fn(timer_request())  # type: ignore[operator]


def test_spring_forward_a_skipped_wall_time_is_the_shifted_occurrence(
    amsterdam: MemoryBackends,
) -> None:
    """02:30 does not exist on 29 March 2026 in Amsterdam: the host fires at 03:30 CEST (01:30
    UTC); the ledger has that occurrence run, and nothing late."""
    runs: list[str] = []

    @once("spring-{occurrence}", schedule=Timer("0 30 2 * * *", catch_up=CatchUp.none()))
    def nightly(timer: func.TimerRequest) -> None:
        runs.append("ran")

    for moment in (utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 30), utc(2026, 3, 30, 0, 30)):
        fired(amsterdam, nightly, moment)
    ledger = ledger_of(nightly)
    recorded = [(e.occurrence, e.outcome) for e in ledger.entries if e.recorded]
    assert recorded == [(utc(2026, 3, 28, 1, 30), Outcome.RAN), (utc(2026, 3, 29, 1, 30),
                        Outcome.RAN), (utc(2026, 3, 30, 0, 30), Outcome.RAN)]  # fmt: skip
    assert len(runs) == 3 and not ledger.missed


def test_fall_back_an_interval_fires_in_both_passes_a_point_in_time_in_the_first(
    amsterdam: MemoryBackends,
) -> None:
    """25 October 2026: 02:00-03:00 repeats. `0 30 * * * *` (an interval) fires 02:30 CEST and
    02:30 CET, both on time in the ledger; `0 30 2 * * *` fires 02:30 CEST only (no late
    entry for the second pass)."""

    @once("hourly-{occurrence}", schedule=Timer("0 30 * * * *", catch_up=CatchUp.none()))
    def hourly(timer: func.TimerRequest) -> None: ...

    @once("night-{occurrence}", schedule=Timer("0 30 2 * * *", catch_up=CatchUp.none()))
    def night(timer: func.TimerRequest) -> None: ...

    first_pass, second_pass = utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 30)
    for moment in (utc(2026, 10, 24, 23, 30), first_pass, second_pass, utc(2026, 10, 25, 2, 30)):
        fired(amsterdam, hourly, moment)
    fired(amsterdam, night, utc(2026, 10, 24, 0, 30))
    fired(amsterdam, night, first_pass)
    amsterdam.clock.now = utc(2026, 10, 25, 3).timestamp()
    hours = ledger_of(hourly)
    assert [e.occurrence for e in hours.entries if e.outcome == Outcome.RAN][-3:] == [
        first_pass, second_pass, utc(2026, 10, 25, 2, 30)]  # fmt: skip
    assert not hours.missed and not hours.late
    nights = ledger_of(night)
    assert second_pass not in [e.occurrence for e in nights.entries]
    assert not nights.missed and not nights.late


def test_a_schedule_with_seconds_catches_up_each_in_order(amsterdam: MemoryBackends) -> None:
    runs: list[bool] = []

    @once("tick-{occurrence}", schedule=Timer(
        "*/15 * * * * *", catch_up=CatchUp.each(within=timedelta(minutes=1)),
        grace=timedelta(seconds=5)))  # fmt: skip
    def tick(timer: func.TimerRequest) -> None:
        runs.append(timer.past_due)

    start = utc(2026, 3, 20, 9)
    fired(amsterdam, tick, start)
    fired(amsterdam, tick, start + timedelta(minutes=1))
    assert runs == [False, True, True, True, False]
    ledger = ledger_of(tick)
    assert [e.outcome for e in ledger.entries if e.occurrence >= start] == [
        Outcome.RAN,
        Outcome.CAUGHT_UP,
        Outcome.CAUGHT_UP,
        Outcome.CAUGHT_UP,
        Outcome.RAN,
    ]


def test_a_firing_joins_a_catch_up_in_progress_in_order_and_leaves_an_on_time_run_alone() -> None:
    """Another instance is catching up night 1 (started hours late): this firing's plan calls
    night 1 too (its guard waits for it), then nights 2 and 3, in order. A run that started on
    time and still runs is no catch-up: the plan leaves it alone."""
    from blobsingleton._timer_policy import plan
    from blobsingleton.timers import Entry, Ledger

    nights = [utc(2026, 11, d, 2) for d in range(20, 25)]
    at = nights[4] + timedelta(seconds=5)

    def ledger(first: Entry) -> Ledger:
        entries = (
            Entry(nights[0], Outcome.RAN, started=nights[0]),
            first,
            Entry(nights[2], Outcome.LATE),
            Entry(nights[3], Outcome.LATE),
            Entry(nights[4], Outcome.DUE),
        )
        return Ledger("f", "0 0 2 * * *", at, nights[0], timedelta(minutes=1), entries, None)

    timer = Timer("0 0 2 * * *", catch_up=CatchUp.each(within=timedelta(days=5)))
    catching_up = Entry(nights[1], Outcome.RUNNING, started=at - timedelta(seconds=1))
    assert plan(ledger(catching_up), nights[4], timer).catch_ups == tuple(nights[1:4])
    on_time = Entry(nights[1], Outcome.RUNNING, started=nights[1] + timedelta(seconds=1))
    assert plan(ledger(on_time), nights[4], timer).catch_ups == tuple(nights[2:4])
    none = Timer("0 0 2 * * *", catch_up=CatchUp.none())
    assert plan(ledger(on_time), nights[4], none).missed == tuple(nights[2:4])
