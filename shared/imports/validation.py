"""Field rules for one member record; reasons name the field and the rule, never the value.

Rejection reasons end up in reports and logs, and values are health data (names, birth
dates), so a reason says "date_of_birth: not a date (YYYY-MM-DD)" and nothing more.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date

from shared.imports.records import Member

MAX_MEMBER_ID = 64
MAX_NAME = 100
MAX_PLAN = 64
EARLIEST_BIRTH = date(1900, 1, 1)
#: Member ids become Table RowKeys: no `/ \ # ?`, no control characters, and never "~..."
#: (the per-account state row).
_MEMBER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


class RecordError(ValueError):
    """One record broke one rule."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def member_id_of(fields: Mapping[str, str]) -> str | None:
    """The record's member id if it is well-formed (safe to log), else None."""
    value = (fields.get("member_id") or "").strip()
    if len(value) <= MAX_MEMBER_ID and _MEMBER_ID.fullmatch(value):
        return value
    return None


def _text(fields: Mapping[str, str], name: str, limit: int) -> str:
    value = (fields.get(name) or "").strip()
    if not value:
        raise RecordError(name, "is empty")
    if len(value) > limit:
        raise RecordError(name, f"is {len(value)} characters long, the limit is {limit}")
    if not value.isprintable():
        raise RecordError(name, "contains control characters")
    return value


def _date(fields: Mapping[str, str], name: str, *, required: bool = True) -> date | None:
    value = (fields.get(name) or "").strip()
    if not value:
        if required:
            raise RecordError(name, "is empty")
        return None
    if not _ISO_DATE.fullmatch(value):
        raise RecordError(name, "is not a date (YYYY-MM-DD)")
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise RecordError(name, "is not a valid calendar date") from None


def validate_member(fields: Mapping[str, str], *, today: date) -> Member:
    """A `Member` from raw field values; `RecordError` for the first rule broken."""
    member_id = (fields.get("member_id") or "").strip()
    if not member_id:
        raise RecordError("member_id", "is empty")
    if len(member_id) > MAX_MEMBER_ID:
        raise RecordError("member_id", f"is longer than {MAX_MEMBER_ID} characters")
    if not _MEMBER_ID.fullmatch(member_id):
        raise RecordError("member_id", "may hold only letters, digits, '.', '-' and '_'")
    first_name = _text(fields, "first_name", MAX_NAME)
    last_name = _text(fields, "last_name", MAX_NAME)
    birth = _date(fields, "date_of_birth")
    assert birth is not None
    if birth > today:
        raise RecordError("date_of_birth", "is in the future")
    if birth < EARLIEST_BIRTH:
        raise RecordError("date_of_birth", f"is before {EARLIEST_BIRTH.isoformat()}")
    plan = _text(fields, "plan", MAX_PLAN)
    start = _date(fields, "coverage_start")
    assert start is not None
    end = _date(fields, "coverage_end", required=False)
    if end is not None and end < start:
        raise RecordError("coverage_end", "is before coverage_start")
    return Member(member_id, first_name, last_name, birth, plan, start, end)
