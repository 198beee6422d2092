"""What readers produce, what validation accepts, and what the Members table holds.

A `SourceRecord` is one CSV row or one 834 member loop as read, with where it starts in the
file. Validation turns it into a `Change`: what that record says about one member (its
maintenance type, demographics, eligibility dates, coverage loops). `maintenance.apply`
folds a change into the member's stored state, a `Member`: demographics, status, and every
coverage (`Coverage`: line of business, plan, begin, end). None of these put names or birth
dates in their repr, so none can leak them into a log line by accident.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Any

from shared.imports.dependents import DependentKey

#: The documented CSV header, and the fields every reader fills.
FIELDS = (
    "member_id",
    "first_name",
    "last_name",
    "date_of_birth",
    "plan",
    "coverage_start",
    "coverage_end",
)

#: Member status after a file: enrolled; ended (termination); ended before it began.
ACTIVE = "active"
TERMINATED = "terminated"
CANCELLED = "cancelled"
STATUSES = (ACTIVE, TERMINATED, CANCELLED)

#: 834 INS03 (member) and HD01 (coverage) maintenance type codes used here.
CHANGE = "001"
DELETE = "002"  # HD01 only: remove the coverage
ADDITION = "021"
TERMINATION = "024"  # cancellation or termination
REINSTATEMENT = "025"
AUDIT = "030"  # audit or compare: the full state of the member
CSV_ROW = "csv"  # a CSV row states the member's whole state, like an audit loop


class SourceFileError(ValueError):
    """The file as a whole cannot be imported (wrong header, empty, broken envelope, ...)."""


@dataclass(frozen=True, repr=False)
class SourceRecord:
    """One record as read: `number` is its first line (CSV) or segment (834) in the file.

    `line` is the physical line it starts on (for CSV the same as `number`; for an 834 the
    line of its INS segment, 0 when unknown). `change` is set by the 834 reader, which
    already knows the record's structure; CSV records carry `fields` only.
    """

    number: int
    unit: str
    raw: str
    fields: dict[str, str] | None = field(default=None, compare=False)
    error: str | None = None
    member_id: str | None = None
    change: Change | None = field(default=None, compare=False)
    line: int = 0
    #: Where the reader can resume right after this record (`{"offset": byte, ...}`, what
    #: the reader needs), or None when it cannot stop here (inside an 834 family).
    resume: dict[str, Any] | None = field(default=None, compare=False)
    #: What rejected it, when `error` is set: the report counts rejections by category.
    category: str = "format"

    @property
    def location(self) -> str:
        return f"{self.unit} {self.number}"

    def __repr__(self) -> str:
        return f"SourceRecord({self.location}, member_id={self.member_id!r}, error={self.error!r})"


@dataclass(frozen=True)
class Coverage:
    """One 2300 loop as stored: HD03 line of business, HD04 plan, HD05 level, 348/349."""

    line: str
    plan: str
    begin: date | None
    end: date | None
    level: str = ""

    @property
    def key(self) -> str:
        return f"{self.line}|{self.plan}"

    @property
    def status(self) -> str:
        """cancelled when it ends on or before its begin (it never took effect)."""
        if self.end is not None and self.begin is not None and self.end <= self.begin:
            return CANCELLED
        return TERMINATED if self.end is not None else ACTIVE

    def to_dict(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "plan": self.plan,
            "level": self.level,
            "begin": _iso(self.begin),
            "end": _iso(self.end),
            "status": self.status,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Coverage:
        return cls(
            line=str(data.get("line") or ""),
            plan=str(data.get("plan") or ""),
            begin=_date(data.get("begin")),
            end=_date(data.get("end")),
            level=str(data.get("level") or ""),
        )


@dataclass(frozen=True)
class CoverageChange:
    """One 2300 loop as read: its HD01 maintenance type and the coverage it states."""

    maintenance: str
    coverage: Coverage


@dataclass(frozen=True, repr=False)
class Change:
    """What one record says about one member. None means "not stated": keep what is stored."""

    member_id: str
    maintenance: str  # INS03, or CSV_ROW
    first_name: str | None = None
    last_name: str | None = None
    date_of_birth: date | None = None
    subscriber: bool = True
    relationship: str = ""  # INS02
    subscriber_id: str = ""  # REF*0F
    eligibility_begin: date | None = None  # 2000 DTP*356
    eligibility_end: date | None = None  # 2000 DTP*357
    effective: date | None = None  # 2000 DTP*303 maintenance effective date
    coverages: tuple[CoverageChange, ...] = ()
    #: A dependent without an id of its own: how to find it (`dependents.py`).
    dependent: DependentKey | None = None

    def __repr__(self) -> str:
        return f"Change(member_id={self.member_id!r}, maintenance={self.maintenance!r})"


@dataclass(frozen=True, repr=False)
class Member:
    """A member's stored state. `plan`/`coverage_start`/`coverage_end` are the first coverage
    (kept for readers of the old one-coverage rows); `coverages` holds all of them."""

    member_id: str
    first_name: str
    last_name: str
    date_of_birth: date | None
    plan: str = ""
    coverage_start: date | None = None
    coverage_end: date | None = None
    coverages: tuple[Coverage, ...] = ()
    status: str = ACTIVE
    status_effective: date | None = None
    eligibility_begin: date | None = None
    eligibility_end: date | None = None
    subscriber: bool = True
    relationship: str = ""
    subscriber_id: str = ""
    maintenance: str = ""

    def __post_init__(self) -> None:
        if not self.coverages and self.plan:
            only = Coverage("", self.plan, self.coverage_start, self.coverage_end)
            object.__setattr__(self, "coverages", (only,))
        elif self.coverages and not self.plan:
            first = self.coverages[0]
            object.__setattr__(self, "plan", first.plan or first.line)
            object.__setattr__(self, "coverage_start", first.begin)
            object.__setattr__(self, "coverage_end", first.end)

    def state(self) -> dict[str, Any]:
        """Everything a file can change, as JSON-able values (equal states: nothing changed)."""
        return {
            "member_id": self.member_id,
            "first_name": self.first_name,
            "last_name": self.last_name,
            "date_of_birth": _iso(self.date_of_birth),
            "coverages": [c.to_dict() for c in self.coverages],
            "status": self.status,
            "status_effective": _iso(self.status_effective),
            "eligibility_begin": _iso(self.eligibility_begin),
            "eligibility_end": _iso(self.eligibility_end),
            "subscriber": self.subscriber,
            "relationship": self.relationship,
            "subscriber_id": self.subscriber_id,
        }

    @classmethod
    def from_state(cls, data: dict[str, Any], maintenance: str = "") -> Member:
        return cls(
            member_id=str(data["member_id"]),
            first_name=str(data.get("first_name") or ""),
            last_name=str(data.get("last_name") or ""),
            date_of_birth=_date(data.get("date_of_birth")),
            coverages=tuple(Coverage.from_dict(c) for c in data.get("coverages") or []),
            status=str(data.get("status") or ACTIVE),
            status_effective=_date(data.get("status_effective")),
            eligibility_begin=_date(data.get("eligibility_begin")),
            eligibility_end=_date(data.get("eligibility_end")),
            subscriber=bool(data.get("subscriber", True)),
            relationship=str(data.get("relationship") or ""),
            subscriber_id=str(data.get("subscriber_id") or ""),
            maintenance=maintenance,
        )

    def __repr__(self) -> str:
        return f"Member(member_id={self.member_id!r}, status={self.status!r})"


def _iso(value: date | None) -> str | None:
    return value.isoformat() if value is not None else None


def _date(value: object) -> date | None:
    return date.fromisoformat(value) if isinstance(value, str) and value else None
