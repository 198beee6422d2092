"""Field rules for one member record, and the member id policy; reasons name the field and
the rule, never the value.

Rejection reasons end up in reports and logs, and values are health data (names, birth
dates), so a reason says "date_of_birth: not a date (YYYY-MM-DD)" and nothing more.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from datetime import date

from shared.imports.maintenance import termination_date
from shared.imports.records import (
    AUDIT,
    CSV_ROW,
    TERMINATION,
    Change,
    Coverage,
    CoverageChange,
    Member,
)

#: NM109 holds up to 80 characters, REF02 up to 50.
MAX_MEMBER_ID = 80
MAX_NAME = 100
MAX_PLAN = 64
EARLIEST_BIRTH = date(1900, 1, 1)
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
#: What a Table PartitionKey/RowKey may not hold (`/ \ # ?`, control characters), plus `%`
#: (the escape itself, so the encoding is reversible).
_KEY_UNSAFE = re.compile(r"[%/\\#?\x00-\x1f\x7f-\x9f]")


class RecordError(ValueError):
    """One record broke one rule."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def member_key(member_id: str) -> str:
    """The member's RowKey: its id with `% / \\ # ?` and control characters percent-encoded
    (UTF-8), and a leading `~` too (RowKeys starting with `~` are the account's own rows:
    its state and its history). Different ids always get different keys."""
    key = _KEY_UNSAFE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), member_id)
    return "%7E" + key[1:] if key.startswith("~") else key


def member_id_of(fields: Mapping[str, str]) -> str | None:
    """The record's member id if the id policy accepts it, else None."""
    value = (fields.get("member_id") or "").strip()
    return value if 0 < len(value) <= MAX_MEMBER_ID else None


def check_member_id(value: str) -> str:
    """The member id policy: any characters real files carry (spaces, `/`, ...), surrounding
    spaces dropped, 1 to 80 of them. Keys stay safe by `member_key`, not by rejecting."""
    member_id = value.strip()
    if not member_id:
        raise RecordError("member_id", "is empty")
    if len(member_id) > MAX_MEMBER_ID:
        raise RecordError("member_id", f"is longer than {MAX_MEMBER_ID} characters")
    return member_id


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
    member_id = check_member_id(fields.get("member_id") or "")
    first_name = _text(fields, "first_name", MAX_NAME)
    last_name = _text(fields, "last_name", MAX_NAME)
    birth = _date(fields, "date_of_birth")
    assert birth is not None
    _birth(birth, today)
    plan = _text(fields, "plan", MAX_PLAN)
    start = _date(fields, "coverage_start")
    assert start is not None
    end = _date(fields, "coverage_end", required=False)
    if end is not None and end < start:
        raise RecordError("coverage_end", "is before coverage_start")
    return Member(member_id, first_name, last_name, birth, plan, start, end)


def change_of_row(member: Member) -> Change:
    """A CSV row as a change: the member's whole state, with its one coverage."""
    coverage = Coverage("", member.plan, member.coverage_start, member.coverage_end)
    return Change(
        member_id=member.member_id,
        maintenance=CSV_ROW,
        first_name=member.first_name,
        last_name=member.last_name,
        date_of_birth=member.date_of_birth,
        coverages=(CoverageChange(AUDIT, coverage),),
    )


def validate_change(change: Change, *, today: date) -> Change:
    """An 834 member loop's change if it keeps the rules; `RecordError` for the first broken.

    Names and the birth date are optional (a change or termination need not repeat them);
    a termination (INS03=024) needs an end date, or it would be stored as open coverage.
    """
    member_id = check_member_id(change.member_id)
    for name, value in (("first_name", change.first_name), ("last_name", change.last_name)):
        if value is not None and value.strip():
            _text({name: value}, name, MAX_NAME)
    if change.date_of_birth is not None:
        _birth(change.date_of_birth, today)
    for item in change.coverages:
        if len(item.coverage.plan) > MAX_PLAN:
            raise RecordError("plan", f"HD04 is longer than {MAX_PLAN} characters")
    if change.maintenance == TERMINATION and termination_date(change) is None:
        raise RecordError(
            "coverage_end",
            "a termination (INS03=024) needs DTP*357 (loop 2000) or DTP*349 (loop 2300)",
        )
    return replace(change, member_id=member_id)


def _birth(birth: date, today: date) -> None:
    if birth > today:
        raise RecordError("date_of_birth", "is in the future")
    if birth < EARLIEST_BIRTH:
        raise RecordError("date_of_birth", f"is before {EARLIEST_BIRTH.isoformat()}")
