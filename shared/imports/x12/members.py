"""What an 834's member loops mean: each 2000 loop (from INS) read into a `Change`.

Read by loop (the map path pyx12 gives each segment), not by segment name alone:

    maintenance     INS03: 001 change, 021 addition, 024 cancellation or termination,
                    025 reinstatement, 030 audit (applied by `maintenance.apply`)
    member id       set by the family's rules (`families.resolve_ids`): REF*0F and the
                    other 2000 REF qualifiers, NM108/NM109 are kept here for them
    names, birth    2100A only: NM1 (NM101 IL, or 74 "corrected insured": the corrected
                    name is the member's name) NM103 last, NM104 first; DMG02 (D8). Loop
                    2100B (NM1*70, "incorrect member name", with its own DMG) holds the
                    old, wrong values: never read into the member, only used to find the
                    dependent it corrects (the identity digest of the values before).
    eligibility     2000 DTP*356 begin, DTP*357 end; DTP*303 maintenance effective date
    coverages       every 2300 loop: HD01 maintenance, HD03 insurance line (HLT, DEN,
                    VIS, ...), HD04 plan, HD05 level; DTP*348 begin, DTP*349 end, each
                    D8 or RD8 (CCYYMMDD-CCYYMMDD: a 348 range gives begin and end)
    file date       header DTP*007 (file effective date), else BGN03: for audit files
                    (`FileFacts`, `read_header`)

A member loop with any pyx12 error is rejected on its own, with at most MAX_REASONS of its
errors; a loop keeps at most IMPORT_MAX_LOOP_SEGMENTS segments (a longer one is rejected,
category LOOP_SIZE). Records carry the segment number of their INS and the physical line
it starts on.

Imports `stream` (the `Segment` it reads) and the app's records, validation and
dependents (the key a dependent is found by).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from shared.imports.config import DEFAULT_MAX_LOOP_SEGMENTS
from shared.imports.dependents import DependentKey
from shared.imports.records import Change, Coverage, CoverageChange, SourceRecord
from shared.imports.validation import member_id_of
from shared.imports.x12.stream import Segment

_D8 = re.compile(r"\d{8}")

#: At most this many of a rejected loop's errors are given as its reason.
MAX_REASONS = 5


@dataclass
class CoverageLoop:
    number: int
    maintenance: str
    line: str
    plan: str
    level: str
    begin: date | None = None
    end: date | None = None


#: The record category of a loop over IMPORT_MAX_LOOP_SEGMENTS (the report counts
#: rejections by category).
LOOP_SIZE = "loop_size"


@dataclass
class MemberLoop:
    """One 2000 loop as read; `record()` turns it into a `SourceRecord` with its `Change`.

    At most `limit` segments are kept (IMPORT_MAX_LOOP_SEGMENTS): a longer loop is read to
    its end without keeping more, and rejected. `start`: where a resumed read could start
    at this loop's INS (None if it cannot)."""

    number: int
    line: int = 0
    limit: int = DEFAULT_MAX_LOOP_SEGMENTS
    start: dict[str, Any] | None = None
    segments: list[str] = field(default_factory=list)
    segment_count: int = 0
    errors: list[str] = field(default_factory=list)
    error_count: int = 0
    subscriber: bool = False
    relationship: str = ""
    maintenance: str = ""
    ref_0f: str = ""
    refs: dict[str, str] = field(default_factory=dict)  # other 2000 REF qualifiers
    nm108: str = ""
    nm109: str = ""
    first_name: str | None = None
    last_name: str | None = None
    birth: date | None = None
    corrected: bool = False  # a 2100B loop (incorrect member name): the values before
    previous_first_name: str | None = None  # 2100B NM104
    previous_birth: date | None = None  # 2100B DMG02
    eligibility_begin: date | None = None
    eligibility_end: date | None = None
    effective: date | None = None
    coverages: list[CoverageLoop] = field(default_factory=list)
    member_id: str = ""
    id_error: str | None = None
    dependent: DependentKey | None = None

    def _error(self, text: str) -> None:
        self.error_count += 1
        if len(self.errors) < MAX_REASONS:
            self.errors.append(text)

    def add(self, seg: Segment) -> None:
        self.segment_count += 1
        if self.segment_count > self.limit:
            return  # rejected by `record()`; nothing more kept
        self.segments.append(seg.text)
        for e in seg.errors:
            self._error(f"segment {seg.number} ({seg.seg_id}): {e}")
        value = seg.data.get_value if seg.data is not None else (lambda _: None)
        loop = loop_of(seg.path)
        try:
            if seg.seg_id == "INS":
                self.subscriber = value("INS01") == "Y"
                self.relationship = value("INS02") or ""
                self.maintenance = value("INS03") or ""
            elif loop == "2000" and seg.seg_id == "REF":
                qualifier, ident = value("REF01") or "", (value("REF02") or "").strip()
                if qualifier == "0F":
                    self.ref_0f = ident
                else:
                    self.refs.setdefault(qualifier, ident)
            elif loop == "2000" and seg.seg_id == "DTP":
                qualifier, when = value("DTP01"), dates(value("DTP02"), value("DTP03"))
                if qualifier == "356":
                    self.eligibility_begin = when[0]
                elif qualifier == "357":
                    self.eligibility_end = when[1]
                elif qualifier == "303":
                    self.effective = when[0]
            elif loop == "2100A" and seg.seg_id == "NM1":  # NM101 IL, or 74: corrected name
                self.last_name = value("NM103") or None
                self.first_name = value("NM104") or None
                self.nm108, self.nm109 = value("NM108") or "", (value("NM109") or "").strip()
            elif loop == "2100A" and seg.seg_id == "DMG" and value("DMG01") == "D8":
                self.birth = dates("D8", value("DMG02"))[0]
            elif loop == "2100B" and seg.seg_id == "NM1":  # NM101 70: the incorrect name
                self.corrected = True
                self.previous_first_name = value("NM104") or None
            elif loop == "2100B" and seg.seg_id == "DMG" and value("DMG01") == "D8":
                self.corrected = True
                self.previous_birth = dates("D8", value("DMG02"))[0]
            elif loop == "2300" and seg.seg_id == "HD":
                self.coverages.append(CoverageLoop(
                    seg.number, value("HD01") or "", value("HD03") or "",
                    (value("HD04") or "").strip(), value("HD05") or "",
                ))  # fmt: skip
            elif loop == "2300" and seg.seg_id == "DTP" and self.coverages:
                qualifier, (begin, end) = value("DTP01"), dates(value("DTP02"), value("DTP03"))
                coverage = self.coverages[-1]
                if qualifier == "348":  # RD8: the range is the coverage period
                    coverage.begin = begin
                    coverage.end = end if value("DTP02") == "RD8" else coverage.end
                elif qualifier == "349":
                    coverage.end = end
        except ValueError as error:  # a bad date: pyx12 has usually said so already
            if not seg.errors:
                self._error(f"segment {seg.number} ({seg.seg_id}): {error}")

    def change(self) -> Change:
        coverages = tuple(
            CoverageChange(c.maintenance, Coverage(c.line, c.plan, c.begin, c.end, c.level))
            for c in self.coverages
        )
        return Change(
            member_id=self.member_id,
            maintenance=self.maintenance,
            first_name=self.first_name,
            last_name=self.last_name,
            date_of_birth=self.birth,
            subscriber=self.subscriber,
            relationship=self.relationship,
            subscriber_id=self.ref_0f,
            eligibility_begin=self.eligibility_begin,
            eligibility_end=self.eligibility_end,
            effective=self.effective,
            coverages=coverages,
            dependent=self.dependent,
        )

    def record(
        self,
        resume: dict[str, Any] | None = None,
        *,
        error: str | None = None,
        category: str = "format",
    ) -> SourceRecord:
        """The loop as a record; `error` (with its `category`): rejected by the family's
        reader (a family over its cap)."""
        raw = "\n".join(self.segments) + "\n"  # each segment keeps its own terminator
        if self.segment_count > self.limit:
            error, category = (
                (
                    f"loop: the member loop has {self.segment_count} segments, more "
                    f"than {self.limit} (IMPORT_MAX_LOOP_SEGMENTS)"
                ),
                LOOP_SIZE,
            )
            raw += f"[{self.segment_count - self.limit} more segment(s) not kept]\n"
        elif error is None and self.errors:
            extra = self.error_count - MAX_REASONS
            error = "; ".join(self.errors) + (f"; {extra} more" if extra > 0 else "")
        elif error is None and self.id_error is not None:
            error = self.id_error
        member_id = member_id_of({"member_id": self.member_id})
        fields = {"member_id": self.member_id}
        return SourceRecord(
            self.number, "segment", raw, fields=fields, error=error, member_id=member_id,
            change=self.change() if error is None else None, line=self.line, resume=resume,
            category=category,
        )  # fmt: skip


def loop_of(path: str) -> str:
    """The innermost loop of a pyx12 map path: ".../2000/2100A/NM1" -> "2100A"."""
    parts = path.rsplit("/", 2)
    return parts[-2] if len(parts) == 3 else ""


def dates(fmt: str | None, value: str | None) -> tuple[date | None, date | None]:
    """(begin, end) of a D8 (both the same day) or RD8 (CCYYMMDD-CCYYMMDD) value."""
    text = value or ""
    if fmt == "RD8":
        first, _, last = text.partition("-")
        return d8(first), d8(last)
    day = d8(text)
    return day, day


def d8(text: str) -> date | None:
    if not _D8.fullmatch(text):
        raise ValueError("not a CCYYMMDD date")
    try:
        return date(int(text[:4]), int(text[4:6]), int(text[6:]))
    except ValueError:
        raise ValueError("not a valid calendar date") from None


@dataclass
class FileFacts:
    """What `read_834` learns about the file besides its members (filled as it reads)."""

    #: Header DTP*007 (file effective date), else BGN03, of the last transaction set.
    effective: date | None = None
    transaction_sets: int = 0


def read_header(seg: Segment, facts: FileFacts) -> None:
    """A segment outside member loops: what it says of the file (`FileFacts`)."""
    value = seg.data.get_value
    try:
        if seg.seg_id == "ST":
            facts.transaction_sets += 1
            facts.effective = None
        elif seg.seg_id == "BGN" and facts.effective is None:
            facts.effective = d8(value("BGN03") or "")
        elif seg.seg_id == "DTP" and loop_of(seg.path) == "HEADER" and value("DTP01") == "007":
            facts.effective = d8(value("DTP03") or "")
    except ValueError:
        pass  # pyx12 reported it; the file failed check_envelope
