"""What readers produce and validation accepts: source records and members.

A `SourceRecord` is one CSV row or one 834 member loop as read, with where it starts in the
file; a `Member` is a validated record. Neither puts names or birth dates in its repr,
so neither can leak them into a log line by accident.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

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


class SourceFileError(ValueError):
    """The file as a whole cannot be imported (wrong header, empty, broken envelope, ...)."""


@dataclass(frozen=True, repr=False)
class SourceRecord:
    """One record as read: `number` is its first line (CSV) or segment (834) in the file."""

    number: int
    unit: str
    raw: str
    fields: dict[str, str] | None = field(default=None, compare=False)
    error: str | None = None
    member_id: str | None = None

    @property
    def location(self) -> str:
        return f"{self.unit} {self.number}"

    def __repr__(self) -> str:
        return f"SourceRecord({self.location}, member_id={self.member_id!r}, error={self.error!r})"


@dataclass(frozen=True, repr=False)
class Member:
    """A validated member, ready to be written."""

    member_id: str
    first_name: str
    last_name: str
    date_of_birth: date
    plan: str
    coverage_start: date
    coverage_end: date | None

    def __repr__(self) -> str:
        return f"Member(member_id={self.member_id!r})"
