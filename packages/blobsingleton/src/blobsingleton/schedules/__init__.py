"""Timer schedules as the Functions host reads them: NCrontab expressions and .NET TimeSpans.

Part of blobsingleton (`blobsingleton.schedules`): it reads the schedule for `{occurrence}`
keys, so that a key names exactly the occurrence the host fires, and a local host (this
repository's devhost) fires its timers by it.
No dependencies beyond the standard library. The grammar follows NCrontab (3.3.3, the version
the timer extension ships with) where it differs from classic cron:

- six fields with seconds first (`0 0 2 * * *` = 02:00:00), or five (seconds = 0); fields are
  separated by spaces only: a tab or a newline between fields makes the expression invalid,
  as does one after a `*` or a name (a number may be followed by white space, as .NET's
  `int.Parse` allows), so a setting with a trailing newline can fail to index;
- day-of-month and day-of-week must *both* match when both are restricted;
- names in any case, full or any prefix: the first name in calendar order that starts with
  it (`Ju` = June, `T` = Tuesday, `S` = Sunday), as NCrontab resolves them;
- ranges written backwards are swapped (`5-2` = `2-5`), `n/step` runs from n to the field's
  maximum, a step below 1 is a step of 1; `L`, `W`, `#`, `?` and `@` macros are refused;
- an impossible date (`0 0 0 30 Feb *`) is valid and never occurs (`NoOccurrence`);
- a schedule that is no cron expression is read as a .NET TimeSpan (`00:05:00`, `1.00:00:00`,
  `24:00:00` = 24 days, as `TimeSpan.Parse` reads it): an interval.

Times are wall-clock times in `WEBSITE_TIME_ZONE` (UTC when unset), with the timer
extension's own daylight-saving rules (`CronSchedule.GetNextOccurrence`):

- a schedule is an *interval* when its seconds, minutes or hours field, as NCrontab prints it,
  holds `*` or a range (two consecutive values): `0 */5 * * * *`, `0 0 9-17 * * *`;
  otherwise a *point in time*: `0 30 1 * * *`, and also `0 */30 1 * * *` (`0,30`);
- in the hour the clock repeats (fall back), an interval fires in both passes; a point in
  time fires in the first pass only;
- a wall time the clock skips (spring forward) fires shifted by the gap (02:30 becomes 03:30),
  then the schedule continues after the shifted time;
- a timer may fire up to about a second before its occurrence (the host's `TimerListener`
  allows for it); `fired_occurrence` names the occurrence such a firing stands for.

The next occurrence is NCrontab's (the first matching wall time after the current one)
corrected the way the host corrects it; the previous one is the latest occurrence of the
host's own sequence, replayed from a few hours before a nearby clock change.
"""

from __future__ import annotations

import os
from calendar import monthrange
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import MAXYEAR, MINYEAR, UTC, date, datetime, timedelta, tzinfo
from functools import cached_property
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

# Its errors live with every other error of the library, and are named here too.
from blobsingleton.errors import HOST_MESSAGE as HOST_MESSAGE
from blobsingleton.errors import InvalidSchedule as InvalidSchedule
from blobsingleton.errors import NoOccurrence as NoOccurrence
from blobsingleton.schedules._ncrontab import (
    _FIELDS,
    _SECONDS,
    _first_at_or_after,
    _last_at_or_before,
    parse_timespan,
)

#: The Gregorian calendar repeats every 400 years: a date not found within them never comes.
_CALENDAR_CYCLE = 400
#: Clock changes are assumed to lie more than this apart (true of every zone in tzdata).
_NEAR = timedelta(hours=4)
#: How far a clock change moves a firing (two hours, Antarctica/Troll); firings more than
#: this from every change are exactly the matching wall times.
_CLEAN = _NEAR / 2
_SECOND = timedelta(seconds=1)
#: (start, end, UTC offset, whether the host fires every matching wall time in it)
_Stretch = tuple[datetime, datetime, timedelta, bool]


# -- schedules ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CronSchedule:
    """An NCrontab schedule, evaluated as wall-clock times in `tz` with the host's DST rules."""

    text: str
    expression: str  # compact form: minute hour day month day-of-week second, `*` or lists
    tz: tzinfo = UTC

    # the parsed fields

    @cached_property
    def _fields(self) -> tuple[tuple[int, ...], ...]:
        """Sorted values of: second, minute, hour, day, month, day of week."""
        *rest, seconds = self.expression.split(" ")
        return (
            _SECONDS.values(seconds),
            *(field.values(text) for field, text in zip(_FIELDS, rest, strict=True)),
        )

    @cached_property
    def _weekdays(self) -> frozenset[int]:
        return frozenset(self._fields[5])

    @cached_property
    def is_interval(self) -> bool:
        """The host's `IsInterval`: the seconds, minutes or hours field, as NCrontab prints it,
        holds `*` or a range, i.e. two consecutive values. Intervals fire in both passes of a
        repeated hour; points in time only in the first."""
        return any(any(value + 1 in values for value in values) for values in self._fields[:3])

    # wall-clock arithmetic (NCrontab works on wall times and knows no zones)

    def _match_at_or_after(self, wall: datetime) -> datetime | None:
        seconds, minutes, hours, days, months, _ = self._fields
        times = (hours, minutes, seconds)
        first_time = (hours[0], minutes[0], seconds[0])
        start = wall.date()
        for year in range(wall.year, min(wall.year + _CALENDAR_CYCLE, MAXYEAR) + 1):
            for month in months:
                if (year, month) < (wall.year, wall.month):
                    continue
                last_day = monthrange(year, month)[1]
                for day in days:
                    if day > last_day:
                        break
                    when = date(year, month, day)
                    if when < start or (when.weekday() + 1) % 7 not in self._weekdays:
                        continue
                    clock = first_time
                    if when == start:
                        clock = _first_at_or_after(times, (wall.hour, wall.minute, wall.second))
                        if clock is None:
                            continue
                    return datetime(year, month, day, *clock)
        return None

    def _match_at_or_before(self, wall: datetime) -> datetime | None:
        seconds, minutes, hours, days, months, _ = self._fields
        times = (hours, minutes, seconds)
        last_time = (hours[-1], minutes[-1], seconds[-1])
        end = wall.date()
        for year in range(wall.year, max(wall.year - _CALENDAR_CYCLE, MINYEAR) - 1, -1):
            for month in reversed(months):
                if (year, month) > (wall.year, wall.month):
                    continue
                last_day = monthrange(year, month)[1]
                for day in reversed(days):
                    if day > last_day:
                        continue
                    when = date(year, month, day)
                    if when > end or (when.weekday() + 1) % 7 not in self._weekdays:
                        continue
                    clock = last_time
                    if when == end:
                        clock = _last_at_or_before(times, (wall.hour, wall.minute, wall.second))
                        if clock is None:
                            continue
                    return datetime(year, month, day, *clock)
        return None

    def _wall_next(self, wall: datetime) -> datetime:
        """NCrontab's next occurrence: the first matching wall time after `wall`'s second."""
        try:
            found = self._match_at_or_after(wall.replace(microsecond=0) + _SECOND)
        except OverflowError:
            found = None
        if found is None:
            raise NoOccurrence(self.text)
        return found

    def _wall(self, moment: datetime) -> datetime:
        return moment.astimezone(self.tz).replace(tzinfo=None)

    def _offset(self, moment: datetime) -> timedelta:
        return moment.astimezone(self.tz).utcoffset() or timedelta(0)

    def _ambiguous(self, wall: datetime) -> bool:
        """The wall time occurs twice (the hour repeated when the clock falls back)."""
        first = wall.replace(tzinfo=self.tz, fold=0)
        if first.utcoffset() == wall.replace(tzinfo=self.tz, fold=1).utcoffset():
            return False
        # a skipped time comes back shifted: not ambiguous
        return self._wall(first.astimezone(UTC)) == wall

    def _instant(self, wall: datetime) -> datetime:
        """A wall time as .NET places it: a repeated time at its standard-time (second)
        instant, a skipped time at the offset before the change (shifted past the gap)."""
        return wall.replace(tzinfo=self.tz, fold=1 if self._ambiguous(wall) else 0).astimezone(UTC)

    # the host's next occurrence

    def next_after(self, after: datetime) -> datetime:
        """The host's next occurrence after `after` (UTC); `NoOccurrence` if none.

        NCrontab's next wall time, placed in the zone and corrected for a repeated hour as
        `CronSchedule.TryAdjustAmbiguousTime` does it (its three "fall back" scenarios)."""
        now = _aware(after).astimezone(UTC)
        candidate = self._instant(self._wall_next(self._wall(now)))
        now_ambiguous = self._ambiguous(self._wall(now))
        next_ambiguous = self._ambiguous(self._wall(candidate))
        if not (now_ambiguous or next_ambiguous):
            return candidate
        shift = self._offset(candidate) - self._offset(now)
        if self.is_interval:
            # scenario 3: an interval crossing the change runs on through both passes
            return candidate + shift
        if not next_ambiguous:
            return candidate
        if shift:
            # scenario 1: a point in time falling in the repeated hour runs in the first pass
            return candidate + shift
        # scenario 2: already in the second pass: that time ran in the first, skip the hour
        wall = self._wall(candidate)
        while self._ambiguous(wall):
            wall = self._wall_next(wall)
        return self._instant(wall)

    # the host's previous occurrence

    def previous_at_or_before(self, moment: datetime) -> datetime:
        """The latest occurrence of the host's sequence at or before `moment` (UTC).

        Away from a clock change that is the latest matching wall time; near one, the host's
        sequence is replayed (`next_after`) from before the change. `NoOccurrence` if none."""
        moment = _aware(moment).astimezone(UTC)
        change = self._clock_change_near(moment)
        if change is None:
            wall = self._match_at_or_before(self._wall(moment))
            if wall is None:
                raise NoOccurrence(self.text)
            latest = self._instant(wall)  # a repeated time's second pass, a skipped one shifted
            if latest >= moment - _CLEAN:
                return latest
            # Far back: a clock change near it may have moved a firing up to _CLEAN later
            # (a skipped time fires shifted); none can lie further on.
            return self.previous_at_or_before(min(moment, latest + _CLEAN))
        return self._replay(moment, change)

    def _clock_change_near(self, moment: datetime) -> datetime | None:
        """The instant the zone's offset changes within `_NEAR` of `moment`, or None."""
        low = (moment - _NEAR).replace(microsecond=0)
        high = (moment + _NEAR).replace(microsecond=0) + _SECOND
        offsets = [self._offset(t) for t in (low, moment, high)]
        if offsets[0] == offsets[1] == offsets[2]:
            return None
        if offsets[0] == offsets[1]:
            low = moment.replace(microsecond=0)
        before = self._offset(low)
        while high - low > _SECOND:
            middle = low + timedelta(seconds=int((high - low).total_seconds()) // 2)
            if self._offset(middle) == before:
                low = middle
            else:
                high = middle
        return high

    def _replay(self, moment: datetime, change: datetime) -> datetime:
        before, after = self._offset(change - _SECOND), self._offset(change)
        gap = before - after  # > 0: the clock falls back and repeats `gap`
        start = change - 2 * _NEAR
        never = datetime.max.replace(tzinfo=UTC)
        # stretches in which the host's sequence is every matching wall time at one offset
        stretches: list[_Stretch] = [(start, change, before, True)]
        if gap > timedelta(0):
            stretches = [
                (start, change - gap, before, True),
                (change - gap, change, before, True),  # first pass
                (change, change + gap, after, self.is_interval),  # second pass
                (change + gap, never, after, True),
            ]
        else:
            stretches.append((change, never, after, True))
        try:
            found: datetime | None = self.previous_at_or_before(start)
        except NoOccurrence:
            found = None
        for _ in range(10_000):
            if found is not None:
                found = self._skip_within(found, moment, stretches)
            following = self.next_after(found if found is not None else start)
            if following > moment:
                break
            found = following
        if found is None:
            raise NoOccurrence(self.text)
        return found

    def _skip_within(
        self,
        found: datetime,
        moment: datetime,
        stretches: list[_Stretch],
    ) -> datetime:
        """The last occurrence at or before `moment` in the stretch `found` lies in."""
        for begin, end, offset, plain in stretches:
            if begin <= found < end:
                if not plain:
                    return found
                limit = min(moment, end - timedelta(microseconds=1))
                wall = self._match_at_or_before(limit.replace(tzinfo=None) + offset)
                if wall is None:
                    return found
                candidate = (wall - offset).replace(tzinfo=UTC)
                return max(found, candidate)
        return found

    def fired_at(self, now: datetime) -> datetime:
        """The occurrence a firing at `now` stands for: the latest at or before `now`, or the
        next one when it is at most `EARLY_FIRE` away and nearer (the timer fired early)."""
        now = _aware(now).astimezone(UTC)
        try:
            latest: datetime | None = self.previous_at_or_before(now)
        except NoOccurrence:
            latest = None
        try:
            following: datetime | None = self.next_after(latest or now)
        except NoOccurrence:
            following = None
        early = following is not None and following - now <= EARLY_FIRE
        if early and following is not None and (latest is None or following - now < now - latest):
            return following
        if latest is None:
            raise NoOccurrence(self.text)
        return latest

    def monitor_disabled(self, now: datetime) -> bool:
        """The host turns the schedule monitor off for this schedule: every field but the
        seconds is `*` and more than one occurrence falls in the minute after `now`."""
        if any(len(values) != high - low + 1 for values, (low, high) in zip(
            self._fields[1:], ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6)), strict=True
        )):  # fmt: skip
            return False
        wall = self._wall(_aware(now))
        second = self._wall_next(self._wall_next(wall))
        return second < wall + timedelta(minutes=1)


@dataclass(frozen=True)
class TimeSpanSchedule:
    """A .NET TimeSpan schedule: every `interval`, counted from the last occurrence."""

    text: str
    interval: timedelta

    def next_after(self, after: datetime) -> datetime:
        return _aware(after) + self.interval

    def monitor_disabled(self, now: datetime) -> bool:
        """The host turns the schedule monitor off for intervals under a minute."""
        return self.interval < timedelta(minutes=1)


Schedule = CronSchedule | TimeSpanSchedule


def parse_schedule(
    schedule: str, function_name: str | None = None, tz: tzinfo | None = None
) -> Schedule:
    """The schedule of a timer trigger (its `%SETTING%`s already resolved); `InvalidSchedule`
    as the host raises it.

    The text is not trimmed: NCrontab splits fields on spaces only, so a tab or a trailing
    newline makes a cron expression invalid (a TimeSpan may be surrounded by white space)."""
    text = schedule
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
    """An NCrontab expression (five or six fields); ValueError saying what is wrong.

    Fields are separated by spaces only (NCrontab's `Split(' ')`), never tabs or newlines."""
    parts = [part for part in text.split(" ") if part]
    if len(parts) == 5:
        seconds = frozenset({0})
        rest = parts
    elif len(parts) == 6:
        seconds = _SECONDS.parse(parts[0])
        rest = parts[1:]
    else:
        hint = " (fields are separated by spaces only)" if len(text.split()) in (5, 6) else ""
        raise ValueError(f"{len(parts)} fields, expected 6 (seconds first) or 5{hint}")
    fields = [field.cron(field.parse(part)) for field, part in zip(_FIELDS, rest, strict=True)]
    return CronSchedule(text, " ".join([*fields, _SECONDS.cron(seconds)]), tz)


def time_zone() -> tzinfo:
    """The zone schedules are read in: `WEBSITE_TIME_ZONE` (an IANA name), else UTC."""
    name = os.environ.get("WEBSITE_TIME_ZONE")
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


#: How early a timer may fire: the host's `TimerListener` allows for a firing before its
#: occurrence ("likely under 1 second due to clock skew"); two seconds leave a margin.
EARLY_FIRE = timedelta(seconds=2)


def fired_occurrence(
    schedule: str,
    status: Mapping[str, Any] | None,
    now: datetime | None = None,
    tz: tzinfo | None = None,
) -> datetime:
    """The occurrence a timer invocation stands for (UTC), the same on every instance.

    While the host runs a timer with a schedule monitor, the status it passes holds Next =
    the occurrence firing now (advanced only after the run), or for a past-due catch-up the
    missed one; a Next up to `EARLY_FIRE` ahead is a timer that fired early. Without a status
    (`use_monitor=False`, or a schedule under a minute, where the host turns the monitor
    off), or with a Next further ahead (a run on start-up, or a status written under another
    schedule), it is the occurrence of the host's sequence the firing stands for: the latest at
    or before now, or the next one if it is at most `EARLY_FIRE` away and nearer (fired early).
    For a TimeSpan schedule it is now, to the second.
    """
    now = _aware(now or datetime.now(UTC)).astimezone(UTC)
    text = status.get("Next") if isinstance(status, Mapping) else None
    if text:
        moment = _aware(datetime.fromisoformat(str(text).replace("Z", "+00:00")))
        if moment <= now + EARLY_FIRE:
            return moment.astimezone(UTC)
    parsed = parse_schedule(schedule, tz=tz)
    if isinstance(parsed, TimeSpanSchedule):
        return now.replace(microsecond=0)
    return parsed.fired_at(now)
