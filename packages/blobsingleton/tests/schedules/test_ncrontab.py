"""Schedules as the Functions host reads them (NCrontab), against documented examples.

Each case names where its rule comes from: Microsoft's timer-trigger docs (the NCRONTAB
examples table) or NCrontab's own parsing rules (CrontabFieldImpl / CrontabField).
"""

from __future__ import annotations

import pickle
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from blobsingleton.schedules import (
    HOST_MESSAGE,
    CronSchedule,
    InvalidSchedule,
    NoOccurrence,
    TimeSpanSchedule,
    fired_occurrence,
    next_occurrence,
    parse_schedule,
)

START = datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC)  # a Thursday


def occurrences(schedule: str, count: int, start: datetime = START) -> list[datetime]:
    parsed = parse_schedule(schedule, tz=UTC)
    assert isinstance(parsed, CronSchedule)
    found, moment = [], start
    for _ in range(count):
        moment = parsed.next_after(moment)
        found.append(moment)
    return found


def at(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


# Microsoft's documented NCRONTAB examples (Azure Functions timer trigger, "NCRONTAB examples").
@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        ("0 */5 * * * *", [at(2026, 1, 1, 0, 5), at(2026, 1, 1, 0, 10)]),
        ("0 0 * * * *", [at(2026, 1, 1, 1), at(2026, 1, 1, 2)]),
        ("0 0 */2 * * *", [at(2026, 1, 1, 2), at(2026, 1, 1, 4)]),
        ("0 0 9-17 * * *", [at(2026, 1, 1, 9), at(2026, 1, 1, 10)]),
        ("0 30 9 * * *", [at(2026, 1, 1, 9, 30), at(2026, 1, 2, 9, 30)]),
        ("0 30 9 * * 1-5", [at(2026, 1, 1, 9, 30), at(2026, 1, 2, 9, 30), at(2026, 1, 5, 9, 30)]),
        ("0 30 9 * Jan Mon", [at(2026, 1, 5, 9, 30), at(2026, 1, 12, 9, 30)]),
        ("0 0 2 * * *", [at(2026, 1, 1, 2), at(2026, 1, 2, 2)]),
    ],
)
def test_microsofts_documented_examples(schedule: str, expected: list[datetime]) -> None:
    assert occurrences(schedule, len(expected)) == expected


def test_day_of_month_and_day_of_week_must_both_match() -> None:
    """NCrontab ANDs the two day fields (classic cron ORs them): Friday the 13th only."""
    fridays_13 = occurrences("0 0 0 13 * 5", 3)
    assert all(d.day == 13 and d.weekday() == 4 for d in fridays_13)
    assert fridays_13[0] == at(2026, 2, 13)


@pytest.mark.parametrize(
    ("written", "same_as"),
    [
        ("0 0 0 * FEBRUARY *", "0 0 0 * 2 *"),  # full name, any case
        ("0 0 0 * feb *", "0 0 0 * 2 *"),
        ("0 0 0 * F *", "0 0 0 * 2 *"),  # any prefix: the first name that starts with it
        ("0 0 0 * Ju *", "0 0 0 * 6 *"),  # June before July
        ("0 0 0 * M *", "0 0 0 * 3 *"),  # March before May
        ("0 0 0 * * T", "0 0 0 * * 2"),  # Tuesday before Thursday
        ("0 0 0 * * s", "0 0 0 * * 0"),  # Sunday before Saturday
        ("0 0 0 * * Mon-Fri", "0 0 0 * * 1-5"),
        ("0 0 0 * * 5-1", "0 0 0 * * 1-5"),  # a backwards range is swapped
        ("5/20 * * * * *", "5,25,45 * * * * *"),  # n/step runs from n to the maximum
        ("*/0 * * * * *", "* * * * * *"),  # a step of 0 is a step of 1
        ("*/15 * * * *", "0 */15 * * * *"),  # five fields: seconds are 0
    ],
)
def test_ncrontab_field_rules(written: str, same_as: str) -> None:
    assert occurrences(written, 5) == occurrences(same_as, 5)


@pytest.mark.parametrize(
    "schedule",
    [
        "0 0 0 L * *",  # L, W, #, ? and @ macros are not NCrontab
        "0 0 0 15W * *",
        "0 0 0 * * 5#3",
        "0 0 0 ? * *",
        "@daily",
        "0 0 0 * * 7",  # day of week is 0-6
        "60 * * * * *",
        "0 0 24 * * *",
        "0 0 0 0 * *",
        "0 0 0 * 13 *",
        "1 2 3",
        "* * * * * * *",
        "0 0 0 * Jax *",
        "0 0 0 * * -1",
        "every day",
        "00:00:00",  # a TimeSpan must be positive
        "00:60:00",
        "",
    ],
)
def test_what_the_host_refuses_is_refused_with_its_message_and_the_function(schedule: str) -> None:
    with pytest.raises(InvalidSchedule) as refused:
        parse_schedule(schedule, "nightly_import", tz=UTC)
    message = str(refused.value)
    assert message.startswith("Error indexing method 'Functions.nightly_import'. ")
    assert HOST_MESSAGE.format(schedule.strip()) in message
    assert isinstance(refused.value, ValueError)
    assert pickle.loads(pickle.dumps(refused.value)).function == "nightly_import"


def test_an_impossible_date_is_valid_and_never_occurs() -> None:
    schedule = parse_schedule("0 0 0 30 Feb *", tz=UTC)
    with pytest.raises(NoOccurrence):
        schedule.next_after(START)


@pytest.mark.parametrize(
    ("text", "interval"),
    [
        ("00:05:00", timedelta(minutes=5)),
        ("1.00:00:00", timedelta(days=1)),
        ("24:00:00", timedelta(days=24)),  # .NET reads hh >= 24 as days
        ("1:02:03:04", timedelta(days=1, hours=2, minutes=3, seconds=4)),
        ("02:30", timedelta(hours=2, minutes=30)),
        ("00:00:01.5", timedelta(seconds=1.5)),
        ("5", timedelta(days=5)),
    ],
)
def test_timespan_schedules_follow_dotnet_timespan_parsing(text: str, interval: timedelta) -> None:
    schedule = parse_schedule(text)
    assert isinstance(schedule, TimeSpanSchedule) and schedule.interval == interval
    assert schedule.next_after(START) == START + interval


AMSTERDAM = ZoneInfo("Europe/Amsterdam")


def test_website_time_zone_reads_the_schedule_in_that_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEBSITE_TIME_ZONE", "Europe/Amsterdam")
    winter = next_occurrence("0 30 9 * * *", at(2026, 1, 1))
    summer = next_occurrence("0 30 9 * * *", at(2026, 7, 1))
    assert (winter, summer) == (at(2026, 1, 1, 8, 30), at(2026, 7, 1, 7, 30))
    monkeypatch.setenv("WEBSITE_TIME_ZONE", "Not/AZone")
    with pytest.raises(InvalidSchedule, match="WEBSITE_TIME_ZONE"):
        parse_schedule("0 30 9 * * *", "f")


def test_the_repeated_hour_runs_a_point_in_time_once_and_an_interval_twice() -> None:
    """2026-10-25: Amsterdam's clock goes from 03:00 back to 02:00; 02:30 happens twice."""
    daily = parse_schedule("0 30 2 * * *", tz=AMSTERDAM)
    first = daily.next_after(at(2026, 10, 24, 12))
    assert first == at(2026, 10, 25, 0, 30)  # 02:30 summer time, the first 02:30
    assert daily.next_after(first) == at(2026, 10, 26, 1, 30)  # not again an hour later
    hourly = parse_schedule("0 0 * * * *", tz=AMSTERDAM)
    fired = [hourly.next_after(at(2026, 10, 24, 23, 30))]
    for _ in range(3):
        fired.append(hourly.next_after(fired[-1]))
    assert fired == [at(2026, 10, 25, hour) for hour in (0, 1, 2, 3)]  # 02:00 twice


def test_a_skipped_time_fires_shifted_by_the_gap() -> None:
    """2026-03-29: Amsterdam's clock jumps from 02:00 to 03:00; 02:30 does not exist."""
    daily = parse_schedule("0 30 2 * * *", tz=AMSTERDAM)
    fired = daily.next_after(at(2026, 3, 28, 12))
    assert fired == at(2026, 3, 29, 1, 30)  # 03:30 summer time: the day still gets its run
    assert daily.next_after(fired) == at(2026, 3, 30, 0, 30)


def test_the_fired_occurrence_is_the_same_on_every_instance() -> None:
    status = {"Last": "2026-01-01T02:00:00+00:00", "Next": "2026-01-02T02:00:00+00:00"}
    late_instance = at(2026, 1, 2, 2, 0, 7)
    assert fired_occurrence("0 0 2 * * *", status, late_instance, tz=UTC) == at(2026, 1, 2, 2)
    no_status = fired_occurrence("0 0 2 * * *", None, late_instance, tz=UTC)
    assert no_status == at(2026, 1, 2, 2)
