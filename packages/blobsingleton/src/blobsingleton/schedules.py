"""Timer schedules as the Functions host reads them: NCrontab expressions and .NET TimeSpans.

One module for the local host's timers and for `{occurrence}` run-once keys, so that a key
names exactly the occurrence the host fires. The grammar and evaluation follow NCrontab, the
library the host evaluates schedules with, where they differ from classic cron:

- six fields with seconds first (`0 0 2 * * *` = 02:00:00), or five (seconds = 0);
- day-of-month and day-of-week must *both* match when both are restricted;
- names in any case, full or any prefix: the first name in calendar order that starts with
  it (`Ju` = June, `T` = Tuesday, `S` = Sunday), as NCrontab resolves them;
- ranges written backwards are swapped (`5-2` = `2-5`), `n/step` runs from n to the field's
  maximum, a step of 0 is a step of 1; `L`, `W`, `#`, `?` and `@` macros are refused;
- an impossible date (`0 0 0 30 Feb *`) is valid and never occurs (`NoOccurrence`);
- a schedule that is no cron expression is read as a .NET TimeSpan (`00:05:00`, `1.00:00:00`,
  `24:00:00` = 24 days, as `TimeSpan.Parse` reads it): an interval;
- times are wall-clock times in `WEBSITE_TIME_ZONE` (UTC when unset): in the hour the clock
  repeats each time fires once (its first instant), a time the clock skips fires at the same
  wall time shifted by the gap (02:30 becomes 03:30 when 02:00 jumps to 03:00).

`croniter` (with `day_or=False`) does the calendar arithmetic; this module parses fields the
way NCrontab does and hands croniter explicit value lists.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

from blobsingleton.errors import BlobSingletonError
from blobsingleton.settings import resolve_placeholders, setting

#: The host's message for a schedule it cannot read (Microsoft.Azure.WebJobs.Extensions.Timers).
HOST_MESSAGE = (
    "The schedule expression '{}' was not recognized as a valid cron expression or timespan string."
)

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")  # fmt: skip
DAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")


class InvalidSchedule(BlobSingletonError, ValueError):
    """A schedule the host would refuse: the function fails to index, as on Azure."""

    _fields = ("schedule", "reason", "function")

    def __init__(self, schedule: str, reason: str, function: str | None = None) -> None:
        where = f"Error indexing method 'Functions.{function}'. " if function else ""
        super().__init__(f"{where}{HOST_MESSAGE.format(schedule)} ({reason})")
        self.schedule = schedule
        self.reason = reason
        self.function = function


class NoOccurrence(BlobSingletonError, LookupError):
    """A valid schedule that never fires (an impossible date such as February 30)."""

    _fields = ("schedule",)

    def __init__(self, schedule: str) -> None:
        super().__init__(f"schedule {schedule!r} has no occurrence")
        self.schedule = schedule


# -- NCrontab fields ------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()

    def parse(self, text: str) -> frozenset[int]:
        """The values `text` selects, by NCrontab's rules; ValueError saying why not."""
        if not text:
            raise ValueError(f"{self.name}: empty")
        values: set[int] = set()
        for part in text.split(",") if text.find(",") > 0 else [text]:
            values |= self._part(part)
        return frozenset(values)

    def _part(self, part: str) -> set[int]:
        if not part:
            raise ValueError(f"{self.name}: empty list item")
        step = None
        if part.find("/") > 0:
            part, step_text = part.split("/", 1)
            step = _number(step_text, f"{self.name} step")
        if part == "*":
            start, end = self.low, self.high
        elif part.find("-") > 0:
            first, last = part.split("-", 1)
            start, end = sorted((self._value(first), self._value(last)))
        else:
            start = self._value(part)
            end = start if step is None else self.high
        return set(range(start, end + 1, max(1, step or 1)))

    def _value(self, text: str) -> int:
        if text[:1].isdigit():
            value = _number(text, self.name)
        else:
            matches = [
                i for i, name in enumerate(self.names) if name.lower().startswith(text.lower())
            ]
            if not text or not matches:
                raise ValueError(f"{self.name}: {text!r} is neither a number nor a known name")
            value = self.low + matches[0]
        if not self.low <= value <= self.high:
            raise ValueError(f"{self.name}: {value} is outside {self.low}-{self.high}")
        return value

    def cron(self, values: frozenset[int]) -> str:
        """croniter's text for a value set: `*` for all, else the explicit list."""
        if values == frozenset(range(self.low, self.high + 1)):
            return "*"
        return ",".join(str(v) for v in sorted(values))


def _number(text: str, what: str) -> int:
    if not text.isdigit() or not text.isascii():
        raise ValueError(f"{what}: {text!r} is not a number")
    return int(text)


_SECONDS = _Field("second", 0, 59)
_FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day", 1, 31),
    _Field("month", 1, 12, MONTHS),
    _Field("day of week", 0, 6, DAYS),
)


# -- schedules ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CronSchedule:
    """An NCrontab schedule, evaluated as wall-clock times in `tz`."""

    text: str
    expression: str  # croniter's form: explicit values, seconds last
    tz: tzinfo = UTC

    def next_after(self, after: datetime) -> datetime:
        """The first occurrence strictly after `after` (UTC); `NoOccurrence` if none."""
        after = _aware(after)
        wall = after.astimezone(self.tz).replace(tzinfo=None)
        iterator = croniter(self.expression, wall, day_or=False)
        for _ in range(4):  # a candidate can only fall before `after` in the repeated hour
            try:
                candidate = self._instant(iterator.get_next(datetime))
            except CroniterBadDateError:
                raise NoOccurrence(self.text) from None
            if candidate > after:
                return candidate
        raise NoOccurrence(self.text)

    def previous_at_or_before(self, moment: datetime) -> datetime:
        """The latest occurrence at or before `moment` (UTC); `NoOccurrence` if none."""
        moment = _aware(moment)
        probe = self.next_after(moment - timedelta(seconds=1))
        if probe <= moment:
            return probe
        wall = moment.astimezone(self.tz).replace(tzinfo=None)
        iterator = croniter(self.expression, wall, day_or=False)
        for _ in range(4):
            try:
                candidate = self._instant(iterator.get_prev(datetime))
            except CroniterBadDateError:
                raise NoOccurrence(self.text) from None
            if candidate <= moment:
                return candidate
        raise NoOccurrence(self.text)

    def _instant(self, wall: datetime) -> datetime:
        """A wall time in `tz` as UTC: the first of a repeated time, shifted past a gap."""
        return wall.replace(tzinfo=self.tz, fold=0).astimezone(UTC)


@dataclass(frozen=True)
class TimeSpanSchedule:
    """A .NET TimeSpan schedule: every `interval`, counted from the last occurrence."""

    text: str
    interval: timedelta

    def next_after(self, after: datetime) -> datetime:
        return _aware(after) + self.interval


Schedule = CronSchedule | TimeSpanSchedule


def parse_schedule(
    schedule: str, function_name: str | None = None, tz: tzinfo | None = None
) -> Schedule:
    """The schedule of a timer trigger, `%SETTING%` resolved; `InvalidSchedule` as the host."""
    try:
        text = resolve_placeholders(schedule).strip()
    except LookupError as error:
        raise InvalidSchedule(schedule, str(error), function_name) from None
    try:
        zone = tz if tz is not None else time_zone()
    except ValueError as error:
        raise InvalidSchedule(text, str(error), function_name) from None
    try:
        return parse_cron(text, zone)
    except ValueError as cron_error:
        reason = str(cron_error)
    interval = parse_timespan(text)
    if interval is None:
        raise InvalidSchedule(text, reason, function_name)
    if interval <= timedelta(0):
        raise InvalidSchedule(text, "a TimeSpan schedule must be positive", function_name)
    return TimeSpanSchedule(text, interval)


def parse_cron(text: str, tz: tzinfo = UTC) -> CronSchedule:
    """An NCrontab expression (five or six fields); ValueError saying what is wrong."""
    parts = text.split()
    if len(parts) == 5:
        seconds = frozenset({0})
        rest = parts
    elif len(parts) == 6:
        seconds = _SECONDS.parse(parts[0])
        rest = parts[1:]
    else:
        raise ValueError(f"{len(parts)} fields, expected 6 (seconds first) or 5")
    fields = [field.cron(field.parse(part)) for field, part in zip(_FIELDS, rest, strict=True)]
    return CronSchedule(text, " ".join([*fields, _SECONDS.cron(seconds)]), tz)


_TS_DAYS = re.compile(r"(\d+)")
_TS_DOTTED = re.compile(r"(\d+)\.(\d+):(\d+)(?::(\d+)(?:\.(\d{1,7}))?)?")
_TS_FOUR = re.compile(r"(\d+):(\d+):(\d+):(\d+)(?:\.(\d{1,7}))?")
_TS_CLOCK = re.compile(r"(\d+):(\d+)(?::(\d+)(?:\.(\d{1,7}))?)?")


def parse_timespan(text: str) -> timedelta | None:
    """`text` as .NET's `TimeSpan.Parse` reads it, or None when it is not a TimeSpan."""
    text = text.strip()
    negative = text.startswith("-")
    body = text[1:] if negative else text
    parsed = _timespan_parts(body)
    if parsed is None:
        return None
    days, hours, minutes, seconds, fraction = parsed
    if hours > 23 or minutes > 59 or seconds > 59:
        return None  # .NET: OverflowException
    value = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds,
                      microseconds=int((fraction or "0").ljust(7, "0")[:7]) / 10)  # fmt: skip
    return -value if negative else value


def _timespan_parts(body: str) -> tuple[int, int, int, int, str | None] | None:
    if match := _TS_DAYS.fullmatch(body):
        return int(match[1]), 0, 0, 0, None
    if match := _TS_DOTTED.fullmatch(body):
        return int(match[1]), int(match[2]), int(match[3]), int(match[4] or 0), match[5]
    if match := _TS_FOUR.fullmatch(body):
        return int(match[1]), int(match[2]), int(match[3]), int(match[4]), match[5]
    if match := _TS_CLOCK.fullmatch(body):
        hours, minutes, seconds = int(match[1]), int(match[2]), int(match[3] or 0)
        if hours > 23 and match[3] is not None and match[4] is None:
            return hours, minutes, seconds, 0, None  # "24:00:00" is 24 days, as .NET reads it
        return 0, hours, minutes, seconds, match[4]
    return None


def time_zone() -> tzinfo:
    """The zone schedules are read in: `WEBSITE_TIME_ZONE` (an IANA name), else UTC."""
    name = setting("WEBSITE_TIME_ZONE")
    if not name:
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"WEBSITE_TIME_ZONE={name!r} is not a time zone this platform knows (on Linux plans "
            "an IANA name such as 'Europe/Amsterdam')"
        ) from None


# -- occurrences ----------------------------------------------------------------------------------
def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _cron(schedule: str, tz: tzinfo | None) -> CronSchedule:
    parsed = parse_schedule(schedule, tz=tz)
    if not isinstance(parsed, CronSchedule):
        raise InvalidSchedule(schedule, "a TimeSpan schedule has no calendar occurrences")
    return parsed


def next_occurrence(schedule: str, after: datetime, tz: tzinfo | None = None) -> datetime:
    """The first occurrence of a cron `schedule` strictly after `after` (UTC)."""
    return _cron(schedule, tz).next_after(after)


def previous_occurrence(
    schedule: str, at_or_before: datetime, tz: tzinfo | None = None
) -> datetime:
    """The latest occurrence of a cron `schedule` at or before `at_or_before` (UTC)."""
    return _cron(schedule, tz).previous_at_or_before(at_or_before)


#: A timer may fire a little before its occurrence by its instance's clock (skew).
EARLY_FIRE = timedelta(seconds=60)


def fired_occurrence(
    schedule: str,
    status: Mapping[str, Any] | None,
    now: datetime | None = None,
    tz: tzinfo | None = None,
) -> datetime:
    """The occurrence a timer invocation stands for (UTC), the same on every instance.

    While the host runs a timer, its ScheduleStatus.Next is the occurrence firing now (it is
    advanced only after the run), and for a past-due catch-up it is the missed occurrence.
    Without a status, or with a Next still in the future (written under another schedule),
    it is the latest occurrence at or before now (for a TimeSpan schedule: now, to the second).
    """
    now = _aware(now or datetime.now(UTC))
    text = status.get("Next") if isinstance(status, Mapping) else None
    if text:
        moment = _aware(datetime.fromisoformat(str(text).replace("Z", "+00:00")))
        if moment <= now + EARLY_FIRE:
            return moment.astimezone(UTC)
    parsed = parse_schedule(schedule, tz=tz)
    if isinstance(parsed, TimeSpanSchedule):
        return now.replace(microsecond=0).astimezone(UTC)
    return parsed.previous_at_or_before(now)
