"""What one record does to a member: the 834 maintenance types applied in file order.

`apply(previous, change)` returns the member's state after the record; `classify` names
what happened (add, change, termination, reinstatement, or nothing). Records are applied
one after another in file order, so the state after a file is what the file says last.

Member level (INS03):

    021 addition        the member as stated; status active
    001 change          stated fields replace stored ones, unstated ones are kept; coverage
                        loops carried are applied (HD01), the others are kept
    024 termination     status terminated, or cancelled when everything ends on or before it
                        began; the end date is DTP*357, else the latest DTP*349 carried; every
                        coverage still open ends then (validation rejects one with neither)
    025 reinstatement   status active; eligibility reopened; the coverage loops carried, or
                        if none, the coverages the termination ended, reopened
    030 audit           the member's whole state: coverages not carried are dropped
    csv                 a CSV row: like 030 for that member, with its one coverage

Coverage level (HD01), keyed by line of business (HD03) and plan (HD04): 002 removes the
coverage; 024 ends it (its own DTP*349, else the member's end date); anything else states
it (dates not carried keep the stored begin; the end is what the loop says). An 001 loop
whose key is new while the member has exactly one coverage in that line is a plan change:
it replaces that coverage.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import date

from shared.imports.records import (
    ACTIVE,
    AUDIT,
    CANCELLED,
    CHANGE,
    CSV_ROW,
    DELETE,
    REINSTATEMENT,
    TERMINATED,
    TERMINATION,
    Change,
    Coverage,
    Member,
)

#: What `classify` returns; UNCHANGED records are counted but leave no history.
ADD = "add"
CHANGED = "change"
TERMINATION_EVENT = "termination"
REINSTATEMENT_EVENT = "reinstatement"
UNCHANGED = "unchanged"
EVENTS = (ADD, CHANGED, TERMINATION_EVENT, REINSTATEMENT_EVENT)


def termination_date(change: Change) -> date | None:
    """The member end date of a 024: DTP*357, else the latest DTP*349 carried."""
    if change.eligibility_end is not None:
        return change.eligibility_end
    ends = [c.coverage.end for c in change.coverages if c.coverage.end is not None]
    return max(ends) if ends else None


def apply(previous: Member | None, change: Change) -> Member:
    """The member after `change` (validated: a 024 has a termination date)."""
    replace_all = change.maintenance in (AUDIT, CSV_ROW) or previous is None
    coverages: dict[str, Coverage] = {} if replace_all else _keyed(previous)
    end = termination_date(change) if change.maintenance == TERMINATION else None
    for item in change.coverages:
        _apply_coverage(coverages, item.maintenance, item.coverage, change.maintenance, end)
    eligibility_begin = change.eligibility_begin
    eligibility_end = change.eligibility_end
    if previous is not None and change.maintenance in (CHANGE, TERMINATION, REINSTATEMENT):
        eligibility_begin = eligibility_begin or previous.eligibility_begin
    if previous is not None and change.maintenance == CHANGE:
        eligibility_end = eligibility_end or previous.eligibility_end
    if change.maintenance == TERMINATION:
        assert end is not None, "validation rejects a termination without an end date"
        coverages = {k: _ended(c, end) for k, c in coverages.items()}
        eligibility_end = eligibility_end or end
    elif change.maintenance == REINSTATEMENT and previous is not None and not change.coverages:
        stopped = previous.status_effective
        coverages = {k: replace(c, end=None) if c.end == stopped else c
                     for k, c in coverages.items()}  # fmt: skip
    result = list(coverages.values())
    status, effective = _status(change, result, eligibility_begin, eligibility_end, end)
    if change.maintenance == CHANGE and previous is not None and previous.status != ACTIVE:
        status, effective = previous.status, previous.status_effective  # 001 does not reinstate
    return Member(
        member_id=change.member_id,
        first_name=_kept(change.first_name, previous.first_name if previous else ""),
        last_name=_kept(change.last_name, previous.last_name if previous else ""),
        date_of_birth=change.date_of_birth or (previous.date_of_birth if previous else None),
        coverages=tuple(result),
        status=status,
        status_effective=effective,
        eligibility_begin=eligibility_begin,
        eligibility_end=eligibility_end,
        subscriber=change.subscriber,
        relationship=change.relationship,
        subscriber_id=change.subscriber_id,
        maintenance=change.maintenance,
    )


def classify(previous: Member | None, current: Member) -> str:
    """What the record did: add, change, termination, reinstatement, or unchanged."""
    ended = current.status != ACTIVE
    if previous is None:
        return TERMINATION_EVENT if ended else ADD
    if previous.state() == current.state():
        return UNCHANGED
    was_ended = previous.status != ACTIVE
    if ended and not was_ended:
        return TERMINATION_EVENT
    if was_ended and not ended:
        return REINSTATEMENT_EVENT
    return CHANGED


def event_effective(kind: str, change: Change | None, member: Member) -> date | None:
    """When what happened takes effect: the end date of a termination, the begin date of an
    add or reinstatement, the maintenance effective date (DTP*303) of a change."""
    if kind in (TERMINATION_EVENT, ADD, REINSTATEMENT_EVENT):
        return member.status_effective
    return change.effective if change is not None else None


def swept(member: Member, end: date) -> Member:
    """A member absent from an audit (030) file: terminated, every open coverage ended."""
    coverages = tuple(_ended(c, end) for c in member.coverages)
    eligibility_end = member.eligibility_end or end
    status, effective = _ended_status(coverages, member.eligibility_begin, eligibility_end, end)
    return replace(member, coverages=coverages, status=status, status_effective=effective,
                   eligibility_end=eligibility_end, maintenance=AUDIT, plan="")  # fmt: skip


def _keyed(member: Member | None) -> dict[str, Coverage]:
    return {c.key: c for c in member.coverages} if member is not None else {}


def _kept(value: str | None, stored: str) -> str:
    return value if value else stored


def _apply_coverage(
    coverages: dict[str, Coverage],
    hd01: str,
    coverage: Coverage,
    ins03: str,
    member_end: date | None,
) -> None:
    key = coverage.key
    stored = coverages.get(key)
    if hd01 == DELETE:
        coverages.pop(key, None)
        return
    if stored is None and ins03 == CHANGE:
        same_line = [k for k, c in coverages.items() if c.line == coverage.line]
        if len(same_line) == 1:  # a plan change within the line of business
            stored = coverages.pop(same_line[0])
    begin = coverage.begin or (stored.begin if stored else None)
    end = coverage.end
    if hd01 == TERMINATION and end is None:
        end = member_end or (stored.end if stored else None)
    coverages[key] = Coverage(coverage.line, coverage.plan, begin, end,
                              coverage.level or (stored.level if stored else ""))  # fmt: skip


def _ended(coverage: Coverage, end: date) -> Coverage:
    if coverage.end is not None and coverage.end <= end:
        return coverage
    return replace(coverage, end=end)


def _status(
    change: Change,
    coverages: list[Coverage],
    eligibility_begin: date | None,
    eligibility_end: date | None,
    end: date | None,
) -> tuple[str, date | None]:
    if change.maintenance == TERMINATION:
        assert end is not None
        return _ended_status(tuple(coverages), eligibility_begin, eligibility_end, end)
    begins = [c.begin for c in coverages if c.begin is not None]
    return ACTIVE, eligibility_begin or (min(begins) if begins else None)


def _ended_status(
    coverages: tuple[Coverage, ...],
    eligibility_begin: date | None,
    eligibility_end: date | None,
    end: date,
) -> tuple[str, date]:
    """cancelled when nothing ever took effect (every end on or before its begin)."""
    spans = [(c.begin, c.end) for c in coverages]
    spans.append((eligibility_begin, eligibility_end))
    dated = [(b, e) for b, e in spans if b is not None and e is not None]
    if dated and all(e <= b for b, e in dated):
        return CANCELLED, end
    return TERMINATED, end
