"""Timer schedules as the Functions host reads them.

NCRONTAB (six fields, seconds first) and five-field cron are parsed by `shared.ncrontab`, the
app's own parser, so the host and the app agree on every schedule. TimeSpan schedules
("hh:mm:ss", an interval) are handled here. Cron times are UTC unless WEBSITE_TIME_ZONE names
an IANA zone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from blobsingleton import schedules as ncrontab
from blobsingleton.settings import setting
from croniter import croniter

from devhost.host_config import HostConfigError, parse_timespan

log = logging.getLogger("devhost.timer")


class ScheduleError(ValueError):
    """The schedule is neither NCRONTAB, cron nor a TimeSpan."""


@dataclass(frozen=True)
class CronSchedule:
    """A cron schedule; `expression` is in croniter's field order (seconds last)."""

    ncrontab: str
    expression: str
    tz: tzinfo = UTC

    def next_after(self, after: datetime) -> datetime:
        """The first occurrence strictly after `after` (an aware datetime), in UTC."""
        start = after.astimezone(self.tz)
        return croniter(self.expression, start).get_next(datetime).astimezone(UTC)


@dataclass(frozen=True)
class IntervalSchedule:
    """A TimeSpan schedule: every `interval` after the last occurrence."""

    interval: timedelta

    def next_after(self, after: datetime) -> datetime:
        return after + self.interval


Schedule = CronSchedule | IntervalSchedule


def time_zone() -> tzinfo:
    """WEBSITE_TIME_ZONE when it names an IANA zone, else UTC like the host."""
    name = setting("WEBSITE_TIME_ZONE")
    if not name:
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        log.warning("WEBSITE_TIME_ZONE=%s is not an IANA zone name: using UTC", name)
        return UTC


def parse_schedule(text: str, tz: tzinfo | None = None) -> Schedule:
    """Parse a schedule; `%SETTING%` placeholders are resolved from app settings."""
    text = text.strip()
    if ":" in text and " " not in text and "%" not in text:
        try:
            seconds = parse_timespan(text)
        except HostConfigError as error:
            raise ScheduleError(str(error)) from error
        if seconds <= 0:
            raise ScheduleError(f"TimeSpan schedule must be positive: {text!r}")
        return IntervalSchedule(timedelta(seconds=seconds))
    try:
        expression = ncrontab.to_croniter(text)
    except ncrontab.InvalidSchedule as error:
        raise ScheduleError(str(error)) from error
    return CronSchedule(ncrontab=text, expression=expression, tz=tz or time_zone())
