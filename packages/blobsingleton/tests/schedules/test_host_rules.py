"""The timer extension's own rules beside the NCrontab grammar, against the host's own tests.

Cases come from Azure/azure-webjobs-sdk-extensions: `CronScheduleTests` (DST into and out of
daylight saving, interval against point in time, `IsInterval`), the comments of
`CronSchedule.TryAdjustAmbiguousTime`, `TimerSchedule.ShouldDisableScheduleMonitor`, and
`TimerListener` (a timer may fire before its occurrence); and from NCrontab (3.3.3), which
splits an expression on spaces only. The host's tests run in Pacific time ("SetLocalTimeZone
ToPacific"); 2018-03-11 02:00 jumps to 03:00, 2018-11-04 02:00 falls back to 01:00.
"""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo

import pytest
from blobsingleton.schedules import (
    EARLY_FIRE,
    HOST_MESSAGE,
    CronSchedule,
    InvalidSchedule,
    TimeSpanSchedule,
    fired_occurrence,
    parse_schedule,
)
from croniter import croniter

PACIFIC = ZoneInfo("America/Los_Angeles")
LONDON = ZoneInfo("Europe/London")


def pacific(*parts: int, offset: int) -> datetime:
    """A `DateTimeOffset` of the host's tests: a wall time with an explicit UTC offset."""
    return datetime(*parts, tzinfo=timezone(timedelta(hours=offset)))  # type: ignore[misc]


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def cron(text: str, tz: tzinfo = PACIFIC) -> CronSchedule:
    schedule = parse_schedule(text, tz=tz)
    assert isinstance(schedule, CronSchedule)
    return schedule


def next_occurrences(schedule: CronSchedule, count: int, start: datetime) -> list[datetime]:
    """`TimerSchedule.GetNextOccurrences`: each next computed from the one before."""
    found = []
    for _ in range(count):
        start = schedule.next_after(start)
        found.append(start)
    return found


# -- CronScheduleTests, ported ------------------------------------------------------------------
def test_interval_into_dst() -> None:
    """Interval_IntoDST_ReturnsExpectedValue: 02:30 does not exist; 03:30 follows 01:30."""
    schedule = cron("0 30 * * * *")
    assert next_occurrences(schedule, 5, pacific(2018, 3, 11, 0, 0, offset=-8)) == [
        pacific(2018, 3, 11, 0, 30, offset=-8),
        pacific(2018, 3, 11, 1, 30, offset=-8),
        pacific(2018, 3, 11, 3, 30, offset=-7),
        pacific(2018, 3, 11, 4, 30, offset=-7),
        pacific(2018, 3, 11, 5, 30, offset=-7),
    ]


def test_point_in_time_into_dst() -> None:
    """PointInTime_IntoDST_ReturnsExpectedValue."""
    schedule = cron("0 30 1 * * *")
    assert next_occurrences(schedule, 5, pacific(2018, 3, 10, 0, 0, offset=-8)) == [
        pacific(2018, 3, 10, 1, 30, offset=-8),
        pacific(2018, 3, 11, 1, 30, offset=-8),
        pacific(2018, 3, 12, 1, 30, offset=-7),
        pacific(2018, 3, 13, 1, 30, offset=-7),
        pacific(2018, 3, 14, 1, 30, offset=-7),
    ]


def test_every_20_minutes_runs_through_both_passes_of_the_repeated_hour() -> None:
    """PointInTime_WithinAmbiguousHour_ReturnsExpectedValue (`*/20` minutes: an interval)."""
    schedule = cron("0 */20 * * * *")
    assert next_occurrences(schedule, 9, pacific(2018, 11, 4, 0, 30, offset=-7)) == [
        pacific(2018, 11, 4, 0, 40, offset=-7),
        pacific(2018, 11, 4, 1, 0, offset=-7),
        pacific(2018, 11, 4, 1, 20, offset=-7),
        pacific(2018, 11, 4, 1, 40, offset=-7),
        pacific(2018, 11, 4, 1, 0, offset=-8),  # the clock fell back: the hour again
        pacific(2018, 11, 4, 1, 20, offset=-8),
        pacific(2018, 11, 4, 1, 40, offset=-8),
        pacific(2018, 11, 4, 2, 0, offset=-8),
        pacific(2018, 11, 4, 2, 20, offset=-8),
    ]


def test_interval_out_of_dst() -> None:
    """Interval_OutOfDST_ReturnsExpectedValue: 01:30 fires twice."""
    schedule = cron("0 30 * * * *")
    assert next_occurrences(schedule, 5, pacific(2018, 11, 4, 0, 0, offset=-7)) == [
        pacific(2018, 11, 4, 0, 30, offset=-7),
        pacific(2018, 11, 4, 1, 30, offset=-7),
        pacific(2018, 11, 4, 1, 30, offset=-8),
        pacific(2018, 11, 4, 2, 30, offset=-8),
        pacific(2018, 11, 4, 3, 30, offset=-8),
    ]


def test_point_in_time_out_of_dst() -> None:
    """PointInTime_OutOfDST_ReturnsExpectedValue: 01:30 fires once, in the first pass."""
    schedule = cron("0 30 1 * * *")
    assert next_occurrences(schedule, 5, pacific(2018, 11, 3, 0, 0, offset=-7)) == [
        pacific(2018, 11, 3, 1, 30, offset=-7),
        pacific(2018, 11, 4, 1, 30, offset=-7),
        pacific(2018, 11, 5, 1, 30, offset=-8),
        pacific(2018, 11, 6, 1, 30, offset=-8),
        pacific(2018, 11, 7, 1, 30, offset=-8),
    ]


def test_a_point_in_time_started_in_the_second_pass_waits_for_the_next_day() -> None:
    """TryAdjustAmbiguousTime, "Fall Back" scenario 2: started at 01:29-8, assume 01:30-7 ran."""
    schedule = cron("0 30 1 * * *")
    started = pacific(2018, 11, 4, 1, 29, offset=-8)
    assert schedule.next_after(started) == pacific(2018, 11, 5, 1, 30, offset=-8)


def test_three_day_schedule_multiple_iterations() -> None:
    """GetNextOccurrence_ThreeDaySchedule_MultipleScheduleIterations (UTC)."""
    schedule = cron("0 59 11 * * 1-5", UTC)
    now = utc(2015, 5, 23, 9)
    for weekday in range(5):  # Monday to Friday
        now = schedule.next_after(now)
        assert (now.weekday(), now.hour, now.minute) == (weekday, 11, 59)
        now += timedelta(seconds=1)


def test_next_after_an_occurrence_is_later() -> None:
    """GetNextOccurrence_NowEqualToNext_ReturnsCorrectValue, six and five fields."""
    for text in ("0 * * * * *", "* * * * *"):
        schedule = cron(text, UTC)
        now = schedule.next_after(utc(2026, 1, 1))
        assert schedule.next_after(now) > now


@pytest.mark.parametrize(
    ("expression", "expected"),
    [  # CronScheduleTests.IsInterval_ReturnsExpectedValue, every case
        ("* * * * * *", True),
        ("0 * * * * *", True),
        ("0 0 * * * *", True),
        ("0 0-15 * * * *", True),
        ("0 0 * * * 0", True),
        ("0 0 1-3 * * 0", True),
        ("0 0 0 * * *", False),
        ("0 0 0 1 * *", False),
        ("0 0 0 1 1 *", False),
        ("0 0 0 * * 1", False),
        ("* * * * *", True),
        ("0 * * * *", True),
        ("0-15 * * * *", True),
        ("0 * * * 0", True),
        ("0 1-3 * * 0", True),
        (" 0 1 * * *", False),
        ("0 0 * * *", False),
        ("0 0 1 * *", False),
        ("0 0 1 1 *", False),
        ("0 0 * * 1", False),
        # NCrontab prints the parsed field: a step is a list, consecutive values a range
        ("0 */30 1 * * *", False),  # `0,30`: a point in time
        ("0,1 0 2 * * *", True),  # `0-1`
        ("0 0 1,3 * * *", False),
        ("0 0 2,3 * * *", True),  # `2-3`
    ],
)
def test_is_interval_as_the_host_decides(expression: str, expected: bool) -> None:
    assert cron(expression, UTC).is_interval is expected


# TimerListenerTests: GetNextInterval around the changes (the interval to the next firing)
@pytest.mark.parametrize(
    ("now", "text", "interval"),
    [  # CronTimerSchedulesExitingDST, every case
        (pacific(2018, 11, 4, 1, 31, offset=-7), "0 30 * * * *", timedelta(minutes=59)),
        (pacific(2018, 11, 4, 1, 59, offset=-7), "0 * * * * *", timedelta(minutes=1)),
        (pacific(2018, 11, 4, 1, 30, offset=-7), "0 * * * * *", timedelta(minutes=1)),
        (pacific(2018, 11, 4, 1, 45, offset=-7), "0 0,30 1-2 * * *", timedelta(minutes=15)),
        (pacific(2018, 11, 4, 1, 45, offset=-8), "0 0,30 1-3 * * *", timedelta(minutes=15)),
        (pacific(2018, 11, 4, 1, 30, offset=-7), "0 * 1-3 * * *", timedelta(minutes=1)),
        (pacific(2018, 11, 4, 0, 59, offset=-7), "0 * * * * *", timedelta(minutes=1)),
        (pacific(2018, 11, 4, 1, 31, offset=-8), "0 30 * * * *", timedelta(minutes=59)),
        (pacific(2018, 11, 2, 18, 0, offset=-7), "0 0 18 * * 5", timedelta(hours=169)),
        (pacific(2018, 11, 4, 1, 30, offset=-7), "0 30 1 * * *", timedelta(hours=25)),
        (pacific(2018, 11, 4, 0, 30, offset=-7), "0 30 1 * * *", timedelta(hours=1)),
        (pacific(2018, 11, 4, 1, 29, offset=-7), "0 30 1 * * *", timedelta(minutes=1)),
        (pacific(2018, 11, 4, 1, 29, offset=-8), "0 30 1 * * *", timedelta(days=1, minutes=1)),
        (pacific(2018, 11, 4, 1, 31, offset=-7), "0 30 1 * * *", timedelta(days=1, minutes=59)),
        # TimerSchedulesEnteringDST and TimerSchedulesWithinDST (2018-03-11 02:00 -> 03:00)
        (pacific(2018, 3, 9, 18, 0, offset=-8), "0 0 18 * * 5", timedelta(hours=167)),
        (pacific(2018, 3, 9, 18, 0, offset=-8), "7.00:00:00", timedelta(days=7)),
        (pacific(2018, 3, 11, 1, 59, offset=-8), "0 59 * * * *", timedelta(hours=1)),
        (pacific(2018, 3, 11, 1, 59, offset=-8), "00:05:00", timedelta(minutes=5)),
    ],
)
def test_the_interval_to_the_next_firing_across_clock_changes(
    now: datetime, text: str, interval: timedelta
) -> None:
    schedule = parse_schedule(text, tz=PACIFIC)
    assert schedule.next_after(now) - now == interval


# -- the cases of the issue ---------------------------------------------------------------------
def test_an_hourly_interval_fires_in_both_passes_in_los_angeles() -> None:
    schedule = cron("0 30 * * * *")
    assert next_occurrences(schedule, 5, utc(2018, 11, 4, 7)) == [
        utc(2018, 11, 4, 7, 30),
        utc(2018, 11, 4, 8, 30),
        utc(2018, 11, 4, 9, 30),  # 01:30 in the second pass
        utc(2018, 11, 4, 10, 30),
        utc(2018, 11, 4, 11, 30),
    ]


def test_hourly_in_london_after_the_first_one_o_clock_is_the_second() -> None:
    """2024-10-27: 02:00 BST falls back to 01:00 GMT; 00:00Z is 01:00 BST, 01:00Z 01:00 GMT."""
    schedule = cron("0 0 * * * *", LONDON)
    assert schedule.next_after(utc(2024, 10, 27, 0)) == utc(2024, 10, 27, 1)
    assert schedule.next_after(utc(2024, 10, 27, 1)) == utc(2024, 10, 27, 2)


@pytest.mark.parametrize(
    ("fired", "stands_for"),
    [
        (utc(2024, 10, 27, 0, 20, 0, 300000), utc(2024, 10, 27, 0, 20)),  # first pass
        (utc(2024, 10, 27, 1, 0, 0, 100000), utc(2024, 10, 27, 1, 0)),  # second pass begins
        (utc(2024, 10, 27, 1, 20, 0), utc(2024, 10, 27, 1, 20)),
        (utc(2024, 10, 27, 1, 20, 4), utc(2024, 10, 27, 1, 20)),  # late
        (utc(2024, 10, 27, 1, 39, 59, 600000), utc(2024, 10, 27, 1, 40)),  # early
        (utc(2024, 10, 27, 2, 0, 1), utc(2024, 10, 27, 2, 0)),
    ],
)
def test_the_occurrence_a_firing_in_the_repeated_hour_stands_for(
    fired: datetime, stands_for: datetime
) -> None:
    assert fired_occurrence("0 */20 * * * *", None, fired, tz=LONDON) == stands_for


def test_a_point_in_time_in_the_repeated_hour_stands_for_the_first_pass() -> None:
    late_in_the_night = pacific(2018, 11, 4, 1, 45, offset=-8)  # second pass, nothing fires
    expected = pacific(2018, 11, 4, 1, 30, offset=-7)
    assert fired_occurrence("0 30 1 * * *", None, late_in_the_night, tz=PACIFIC) == expected


# -- early firing (TimerListener: "fired before it was officially scheduled") -------------------
TONIGHT = utc(2026, 11, 22, 2)
EARLY = TONIGHT - timedelta(milliseconds=400)


def test_an_early_firing_without_a_monitor_stands_for_tonight() -> None:
    for status in (None, {}):
        assert fired_occurrence("0 0 2 * * *", status, EARLY, tz=UTC) == TONIGHT
    assert fired_occurrence("0 0 2 * * *", None, TONIGHT + timedelta(seconds=3), tz=UTC) == TONIGHT
    too_early = TONIGHT - EARLY_FIRE - timedelta(seconds=1)
    assert fired_occurrence("0 0 2 * * *", None, too_early, tz=UTC) == TONIGHT - timedelta(days=1)


def test_an_early_firing_with_a_monitor_stands_for_the_status_next() -> None:
    status = {"Last": "2026-11-21T02:00:00+00:00", "Next": "2026-11-22T02:00:00+00:00"}
    assert fired_occurrence("0 0 2 * * *", status, EARLY, tz=UTC) == TONIGHT


def test_a_late_firing_of_an_every_second_schedule_keeps_its_second() -> None:
    """Occurrences a second apart: a firing is early only when nearer the next one."""
    second = utc(2026, 1, 1, 12, 0, 0)
    late = second + timedelta(milliseconds=300)
    assert fired_occurrence("* * * * * *", None, late, tz=UTC) == second
    early = second - timedelta(milliseconds=300)
    assert fired_occurrence("* * * * * *", None, early, tz=UTC) == second


# -- the monitor the host turns off -------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "off"),
    [
        ("*/10 * * * * *", True),
        ("* * * * * *", True),
        ("0 * * * * *", False),
        ("0 */5 * * * *", False),
        ("*/10 * * * 1-5 *", False),  # ShouldDisableScheduleMonitor: only `X * * * * *`
        ("00:00:30", True),
        ("00:01:00", False),
    ],
)
def test_the_monitor_is_off_for_schedules_under_a_minute(text: str, off: bool) -> None:
    schedule = parse_schedule(text, tz=UTC)
    assert isinstance(schedule, CronSchedule | TimeSpanSchedule)
    assert schedule.monitor_disabled(utc(2026, 1, 1, 12, 0, 5)) is off


# -- NCrontab splits on spaces only -------------------------------------------------------------
@pytest.mark.parametrize(
    "schedule",
    [
        "0\t0\t2\t*\t*\t*",  # tabs between all fields: one field
        "0 0 2 * *\t*",  # a tab between two: five fields, `*\t` is no value
        "0 0 2 * * *\n",  # a setting with a trailing newline
        "0 0 2 * * Mon\t",
        "0\n0 2 * * *",
    ],
)
def test_fields_separated_by_other_white_space_are_refused_with_the_hosts_message(
    schedule: str,
) -> None:
    with pytest.raises(InvalidSchedule) as refused:
        parse_schedule(schedule, "nightly_import", tz=UTC)
    message = str(refused.value)
    assert message.startswith("Error indexing method 'Functions.nightly_import'. ")
    assert HOST_MESSAGE.format(schedule) in message  # the expression as written, untrimmed
    if " " not in schedule:
        assert "fields are separated by spaces only" in message


def test_a_number_may_be_followed_by_white_space_as_int_parse_allows() -> None:
    """NCrontab reads a number with `int.Parse`, which skips trailing white space."""
    assert cron("0 0 2\n * * *", UTC).next_after(utc(2026, 1, 1)) == utc(2026, 1, 1, 2)
    assert cron("  0 0 2  * * 4\t", UTC).next_after(utc(2026, 1, 2)) == utc(2026, 1, 8, 2)


# -- the previous occurrence is the host's own sequence -----------------------------------------
ZONES = [
    PACIFIC,
    LONDON,
    ZoneInfo("Europe/Amsterdam"),
    ZoneInfo("Australia/Lord_Howe"),  # the clock moves by 30 minutes
    ZoneInfo("Antarctica/Troll"),  # by two hours
    UTC,
]
CHANGES = [utc(2018, 11, 4, 9), utc(2018, 3, 11, 10), utc(2024, 10, 27, 1), utc(2024, 3, 31, 1),
           utc(2024, 4, 6, 15), utc(2024, 10, 5, 15)]  # fmt: skip
SCHEDULES = ["0 30 * * * *", "0 */20 * * * *", "0 30 1 * * *", "0 */30 1 * * *", "0 0 2 * * *",
             "0 10 0-1,3 * * *", "0 15,45 2,3 * * *", "*/15 * * * * *", "0 0 0 * * *",
             "0 30 2 * * 0", "0 20,35 2 * * *"]  # fmt: skip


@pytest.mark.parametrize("zone", ZONES, ids=str)
@pytest.mark.parametrize("text", SCHEDULES)
def test_previous_and_next_walk_the_same_sequence_across_clock_changes(
    zone: tzinfo, text: str
) -> None:
    schedule = cron(text, zone)
    for change in CHANGES:
        start = change - timedelta(hours=5)
        steps = 40 if text.startswith("*/15") else 12
        sequence = next_occurrences(schedule, steps, start)
        for earlier, later in itertools.pairwise(sequence):
            assert schedule.previous_at_or_before(earlier) == earlier
            assert schedule.previous_at_or_before(later - timedelta(microseconds=1)) == earlier
            assert schedule.previous_at_or_before(earlier + (later - earlier) / 2) == earlier


def test_wall_clock_search_agrees_with_croniter() -> None:
    """NCrontab's next occurrence in UTC, checked against croniter (day_or=False) as oracle."""
    chooser = random.Random(20261123)
    fields = [("*", "*/7", "5", "10-20", "0,30,45"), ("*", "*/5", "0", "7-9,30"),
              ("*", "*/6", "2", "9-17"), ("*", "1", "13", "29-31", "*/10"),
              ("*", "2", "Feb", "6-8", "*/4"), ("*", "0", "5", "1-5", "Sat,Sun")]  # fmt: skip
    for _ in range(300):
        parts = [chooser.choice(options) for options in fields]
        schedule = cron(" ".join(parts), UTC)
        start = utc(2024, 1, 1) + timedelta(seconds=chooser.randrange(4 * 365 * 86400))
        oracle = croniter(schedule.expression, start.replace(tzinfo=None), day_or=False)
        expected = oracle.get_next(datetime).replace(tzinfo=UTC)
        assert schedule.next_after(start) == expected, parts
        assert schedule.previous_at_or_before(expected) == expected
        assert schedule.previous_at_or_before(expected - timedelta(seconds=1)) < expected


@pytest.mark.parametrize("zone", ZONES, ids=str)
def test_previous_is_the_latest_of_the_replayed_sequence_at_random_moments(zone: tzinfo) -> None:
    """Against a plain replay of `next_after` from a day before each change, step by step."""
    chooser = random.Random(str(zone))
    for text in SCHEDULES:
        schedule = cron(text, zone)
        span = timedelta(hours=3 if text.startswith("*/15") else 30)
        for change in CHANGES:
            sequence = next_occurrences(schedule, 1, change - span)
            while sequence[-1] < change + span:
                sequence.append(schedule.next_after(sequence[-1]))
            for _ in range(25):
                moment = sequence[0] + (sequence[-1] - sequence[0]) * chooser.random()
                expected = max(o for o in sequence if o <= moment)
                assert schedule.previous_at_or_before(moment) == expected, (text, moment)
