"""NCRONTAB schedules: six fields with seconds first, %SETTING% resolved, TimeSpans."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from blobsingleton.schedules import InvalidSchedule, TimeSpanSchedule, parse_schedule

from devhost.indexing import TimerTrigger

T0 = datetime(2024, 3, 1, 10, 0, 0, tzinfo=UTC)


def test_six_fields_put_seconds_first() -> None:
    every_five_minutes = parse_schedule("0 */5 * * * *")
    assert every_five_minutes.next_after(T0) == T0 + timedelta(minutes=5)
    at_second_30 = parse_schedule("30 * * * * *")
    assert at_second_30.next_after(T0) == T0 + timedelta(seconds=30)
    daily_2am = parse_schedule("0 0 2 * * *")
    assert daily_2am.next_after(T0) == datetime(2024, 3, 2, 2, 0, 0, tzinfo=UTC)


def test_five_field_cron_and_timespan() -> None:
    assert parse_schedule("*/10 * * * *").next_after(T0) == T0 + timedelta(minutes=10)
    interval = parse_schedule("00:00:05")
    assert isinstance(interval, TimeSpanSchedule)
    assert interval.next_after(T0) == T0 + timedelta(seconds=5)


def test_schedule_from_an_app_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLEANUP_SCHEDULE", "15 0 * * * *")
    trigger = TimerTrigger(schedule="%CLEANUP_SCHEDULE%")
    schedule = parse_schedule(trigger.resolved_schedule())
    assert schedule.next_after(T0) == T0 + timedelta(seconds=15)


def test_invalid_schedules_are_rejected() -> None:
    for text in ("every day", "0 0 25 * * *", "1 2 3", "00:00:00"):
        with pytest.raises(InvalidSchedule):
            parse_schedule(text)
