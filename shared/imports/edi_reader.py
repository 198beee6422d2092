"""X12 834 (005010X220A1) benefit enrollment files, parsed and validated by pyx12.

pyx12 walks every segment against the 834 implementation guide map (loops, usage, codes,
dates, lengths) as it streams; this module only groups its segments into member loops
(2000, starting at INS) and maps them onto the CSV's fields:

    member_id       REF*23 (the member's own id) if present, else REF*0F for a subscriber
                    (INS01=Y); a dependent without REF*23 is rejected
    last/first      NM1*IL (loop 2100A) NM103 / NM104
    date_of_birth   DMG02 (DMG01=D8, CCYYMMDD)
    plan            HD04 of the first 2300 loop, else its HD03 (insurance line code)
    coverage_start  DTP*348 of that 2300 loop; coverage_end DTP*349 (optional)

A termination (INS03=024) is imported as the member with its end date: DTP*349, else the
member's eligibility end DTP*357 (loop 2000). One without either is rejected, because an
upsert without an end date would turn the termination into open-ended coverage.

Reading a file takes two passes (two streamed downloads, memory stays flat):
`check_envelope` first: an ISA/GS/ST-level error, a missing trailer (a truncated file),
bytes after the last segment, or an error outside any member loop rejects the whole file,
as an X12 acknowledgment would reject the transaction set. Only an intact file gets the
second pass, `read_834`, where a member loop with any pyx12 error is rejected on its own.
pyx12 messages can quote element values (a birth date), so quoted values are masked.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

import pyx12.error_handler
import pyx12.errors
import pyx12.params
import pyx12.x12context

from shared.imports.records import SourceFileError, SourceRecord
from shared.imports.text_stream import has_undecodable
from shared.imports.validation import member_id_of

_D8 = re.compile(r"\d{8}")
MAX_REASONS = 5
TERMINATION = "024"  # INS03: cancellation or termination


@dataclass
class _Segment:
    seg_id: str
    number: int
    text: str
    path: str
    data: Any
    errors: list[str]


def _mask(message: str, value: object) -> str:
    if isinstance(value, str) and value.strip():
        message = message.replace(value, "…")
    return message


def _drain(errh: pyx12.error_handler.errh_list) -> tuple[list[str], list[str]]:
    """(envelope-level errors, segment/element errors) collected since the last drain."""
    envelope = [f"{code}: {text}" for code, text in errh.err_isa + errh.err_gs + errh.err_st]
    segment = [_mask(f"{code}: {text}", value) for code, text, value in errh.err_seg]
    segment += [
        _mask(f"{refdes or 'element'}: {text}", value) for code, text, value, refdes in errh.err_ele
    ]
    errh.reset()
    return envelope, segment


#: What pyx12 raises on malformed input: its own errors, and (found by fuzzing, e.g. a segment
#: cut short) plain IndexError/ValueError/KeyError/TypeError from inside it. Storage errors
#: from the stream are none of these, so they still propagate and the run is retried.
_PARSER_FAILURES = (
    pyx12.errors.X12Error,
    pyx12.errors.EngineError,
    IndexError,
    KeyError,
    TypeError,
    ValueError,
    AttributeError,
)


def _segments(stream: TextIO, envelope_errors: list[str]) -> Iterator[_Segment]:
    """pyx12's segments with their own errors; envelope errors are appended as they appear."""
    first = stream.read(3)
    if not first:
        raise SourceFileError("empty file")
    if first != "ISA":
        raise SourceFileError("not an X12 interchange: the file does not start with ISA")
    source = _Prefixed(first, stream)
    errh = pyx12.error_handler.errh_list()
    params = pyx12.params.params()
    try:
        reader = pyx12.x12context.X12ContextReader(params, errh, source)
    except pyx12.errors.X12Error as error:
        # pyx12's message quotes only the ISA header (sender/receiver ids, no member data)
        raise SourceFileError(f"not a valid X12 interchange header: {error}") from None
    except _PARSER_FAILURES as error:
        raise SourceFileError(
            f"not a valid X12 interchange header: {type(error).__name__}"
        ) from None
    try:
        for node in reader.iter_segments():
            envelope, errors = _drain(errh)
            envelope_errors.extend(envelope)
            seg = node.seg_data
            text = seg.format() if seg is not None else ""
            if has_undecodable(text):
                errors.append("segment is not valid UTF-8")
            yield _Segment(
                seg_id=seg.get_seg_id() if seg is not None else "",
                number=int(node.cur_line_number or 0),
                text=text,
                path=node.x12_map_node.get_path() if node.x12_map_node is not None else "",
                data=seg,
                errors=errors,
            )
        reader.src.cleanup()  # missing SE / GE / IEA: a truncated file
        errh.handle_errors(reader.src.pop_errors())
        envelope, errors = _drain(errh)
        envelope_errors.extend(envelope + errors)
        leftover = reader.src.raw.buffer.strip()
        if leftover:
            envelope_errors.append(f"{len(leftover)} character(s) after the last segment")
    except _PARSER_FAILURES as error:
        raise SourceFileError(f"pyx12 could not parse the file: {type(error).__name__}") from None


class _Prefixed:
    """A stream with its first characters (already read to sniff the format) put back."""

    def __init__(self, prefix: str, stream: TextIO) -> None:
        self._prefix = prefix
        self._stream = stream
        self.closed = False

    def read(self, size: int = -1) -> str:
        if not self._prefix:
            return self._stream.read(size)
        if size < 0:
            text, self._prefix = self._prefix + self._stream.read(), ""
            return text
        head, self._prefix = self._prefix[:size], self._prefix[size:]
        return head + (self._stream.read(size - len(head)) if size > len(head) else "")

    def close(self) -> None:
        self.closed = True


def check_envelope(stream: TextIO) -> list[str]:
    """Pass 1: why the file must be rejected as a whole; [] when it may be imported."""
    problems: list[str] = []
    in_member = False
    for seg in _segments(stream, problems):
        if seg.seg_id == "INS":
            in_member = True
        elif seg.seg_id in ("SE", "GE", "IEA", "ST", "GS", "ISA"):
            in_member = False
        if seg.errors and not in_member:
            problems.extend(f"segment {seg.number} ({seg.seg_id}): {e}" for e in seg.errors)
    return problems


@dataclass
class _MemberLoop:
    number: int
    segments: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    values: dict[str, str] = field(default_factory=dict)
    subscriber: bool = False
    maintenance: str = ""
    eligibility_end: str = ""
    ref_0f: str = ""
    ref_23: str = ""
    coverage_loops: int = 0

    def add(self, seg: _Segment) -> None:
        self.segments.append(seg.text)
        self.errors.extend(f"segment {seg.number} ({seg.seg_id}): {e}" for e in seg.errors)
        value = seg.data.get_value if seg.data is not None else (lambda _: None)
        if seg.seg_id == "INS":
            self.subscriber = value("INS01") == "Y"
            self.maintenance = value("INS03") or ""
        elif seg.seg_id == "REF" and "/2000/" in seg.path and "/2300" not in seg.path:
            qualifier, ident = value("REF01"), value("REF02") or ""
            if qualifier == "0F":
                self.ref_0f = ident
            elif qualifier == "23":
                self.ref_23 = ident
        elif seg.seg_id == "NM1" and value("NM101") == "IL":
            self.values["last_name"] = value("NM103") or ""
            self.values["first_name"] = value("NM104") or ""
        elif seg.seg_id == "DMG" and value("DMG01") == "D8":
            self.values["date_of_birth"] = _iso(value("DMG02"))
        elif seg.seg_id == "DTP" and seg.path.endswith("/2000/DTP") and value("DTP01") == "357":
            self.eligibility_end = _iso(value("DTP03"))
        elif seg.seg_id == "HD":
            self.coverage_loops += 1
            if self.coverage_loops == 1:
                self.values["plan"] = value("HD04") or value("HD03") or ""
        elif seg.seg_id == "DTP" and self.coverage_loops == 1 and "/2300/" in seg.path:
            qualifier = value("DTP01")
            if qualifier == "348":
                self.values["coverage_start"] = _iso(value("DTP03"))
            elif qualifier == "349":
                self.values["coverage_end"] = _iso(value("DTP03"))

    def record(self) -> SourceRecord:
        member_id = self.ref_23 or (self.ref_0f if self.subscriber else "")
        fields = {"member_id": member_id, "coverage_end": "", **self.values}
        termination = self.maintenance == TERMINATION
        if termination and not fields["coverage_end"]:
            fields["coverage_end"] = self.eligibility_end
        error = None
        if self.errors:
            extra = len(self.errors) - MAX_REASONS
            error = "; ".join(self.errors[:MAX_REASONS]) + (f"; {extra} more" if extra > 0 else "")
        elif not member_id:
            error = "member_id: a dependent (INS01=N) needs its own id in REF*23"
        elif termination and not fields["coverage_end"]:
            error = "coverage_end: a termination (INS03=024) needs DTP*349 or DTP*357"
        raw = "\n".join(self.segments) + "\n"  # each segment keeps its own terminator
        return SourceRecord(
            self.number, "segment", raw, fields=fields, error=error,
            member_id=member_id_of(fields),
        )  # fmt: skip


def _iso(value: str | None) -> str:
    """CCYYMMDD as YYYY-MM-DD; anything else unchanged, for validation to reject."""
    text = value or ""
    return f"{text[:4]}-{text[4:6]}-{text[6:]}" if _D8.fullmatch(text) else text


def read_834(stream: TextIO) -> Iterator[SourceRecord]:
    """Pass 2: one record per member loop. Call only on a file `check_envelope` passed."""
    problems: list[str] = []
    member: _MemberLoop | None = None
    for seg in _segments(stream, problems):
        if seg.seg_id == "INS" or seg.seg_id in ("SE", "GE", "IEA", "ST", "GS", "ISA"):
            if member is not None:
                yield member.record()
                member = None
            if seg.seg_id == "INS":
                member = _MemberLoop(seg.number)
        if member is not None:
            member.add(seg)
    if member is not None:
        yield member.record()
    if problems:
        raise SourceFileError(f"envelope errors: {'; '.join(problems[:MAX_REASONS])}")
