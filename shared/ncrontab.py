"""NCRONTAB schedules, as the Functions timer trigger reads them, evaluated with croniter.

The host's six-field form puts seconds first (`0 0 2 * * *` = 02:00:00 daily); croniter puts
them last, so the fields are rotated. Five-field cron is accepted as "at second 0".
"""

from __future__ import annotations

from datetime import UTC, datetime

from croniter import croniter

from shared.settings import resolve_placeholders


class InvalidSchedule(ValueError):
    """A timer schedule that is not a valid five- or six-field NCRONTAB expression."""


def to_croniter(schedule: str) -> str:
    """The croniter expression for an NCRONTAB schedule (`%SETTING%` resolved first)."""
    fields = resolve_placeholders(schedule).split()
    if len(fields) == 6:
        fields = [*fields[1:], fields[0]]
    elif len(fields) != 5:
        raise InvalidSchedule(f"schedule {schedule!r} must have 5 or 6 fields, not {len(fields)}")
    expression = " ".join(fields)
    if not croniter.is_valid(expression):
        raise InvalidSchedule(f"schedule {schedule!r} is not a valid NCRONTAB expression")
    return expression


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def next_occurrence(schedule: str, after: datetime) -> datetime:
    """The first occurrence strictly after `after` (UTC)."""
    return croniter(to_croniter(schedule), _aware(after)).get_next(datetime)


def previous_occurrence(schedule: str, at_or_before: datetime) -> datetime:
    """The latest occurrence at or before `at_or_before` (UTC)."""
    moment = _aware(at_or_before)
    nxt = next_occurrence(schedule, moment.replace(microsecond=0) - _ONE_SECOND)
    if nxt <= moment:
        return nxt
    return croniter(to_croniter(schedule), moment).get_prev(datetime)


_ONE_SECOND = datetime.fromtimestamp(1, UTC) - datetime.fromtimestamp(0, UTC)
