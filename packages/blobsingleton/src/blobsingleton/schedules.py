"""NCRONTAB schedules, as the Functions timer trigger reads them, evaluated with croniter.

The host's six-field form puts seconds first (`0 0 2 * * *` = 02:00:00 daily); croniter puts
them last, so the fields are rotated. Five-field cron is accepted as "at second 0".
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from croniter import croniter

from blobsingleton.settings import resolve_placeholders


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


#: A timer may fire a little before its occurrence by its instance's clock (skew).
EARLY_FIRE = timedelta(seconds=60)


def fired_occurrence(
    schedule: str, status: Mapping[str, Any] | None, now: datetime | None = None
) -> datetime:
    """The occurrence a timer invocation stands for (UTC), the same on every instance.

    While the host runs a timer, its ScheduleStatus.Next is the occurrence firing now (it is
    advanced only after the run), and for a past-due catch-up it is the missed occurrence.
    Without a status, or with a Next still in the future (written under another schedule),
    it is the latest occurrence at or before now.
    """
    now = _aware(now or datetime.now(UTC))
    text = (status or {}).get("Next") if isinstance(status, Mapping) else None
    if text:
        moment = _aware(datetime.fromisoformat(str(text).replace("Z", "+00:00")))
        if moment <= now + EARLY_FIRE:
            return moment.astimezone(UTC)
    return previous_occurrence(schedule, now).astimezone(UTC)


_ONE_SECOND = datetime.fromtimestamp(1, UTC) - datetime.fromtimestamp(0, UTC)
