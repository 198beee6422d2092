"""X12 834 benefit enrollment files (005010X220A1, and 004010X095A1): the reader's two passes.

pyx12 walks every segment against the 834 implementation guide map (loops, usage, codes,
dates, lengths) as it streams (`stream`); the members pass groups its segments into member
loops (2000, starting at INS, read by `members`) and families (`families`), and yields one
`SourceRecord` per member loop.

Reading a file takes two passes (two streamed downloads, memory stays flat):
`check_envelope` / `scan_envelope` first: an ISA/GS/ST-level error, a missing trailer (a
truncated file), bytes after the last segment, or an error outside any member loop rejects
the whole file, as an X12 acknowledgment would reject the transaction set. Only an intact
file gets the second pass, `read_834`, where a member loop with any pyx12 error is rejected
on its own. Both passes tell a `SegmentListener` (`acks.AckWriter`) what they read, and both
resume mid-file from a resume point (`stream`).

Speed: `speedups.install()` (the importer calls it) makes both passes faster with the same
results; the reader runs without it too.

Imports `stream`, `members`, `families` and `errors` of this package, and the app's
records. Nothing here changes pyx12.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import date
from typing import Any

from shared.imports.records import SourceFileError, SourceRecord
from shared.imports.x12.errors import SegmentErrors
from shared.imports.x12.families import Families, ReadLimits
from shared.imports.x12.members import MAX_REASONS, FileFacts, MemberLoop, read_header
from shared.imports.x12.stream import (
    ENVELOPE,
    Header,
    LineIndex,
    SegmentListener,
    TextSource,
    segments,
)


def check_envelope(stream: TextSource) -> list[str]:
    """Pass 1: why the file must be rejected as a whole; [] when it may be imported."""
    return scan_envelope(stream)[0]


def scan_envelope(
    stream: TextSource,
    resume: dict[str, Any] | None = None,
    stop: Callable[[], bool] | None = None,
    *,
    limits: ReadLimits | None = None,
    ack: SegmentListener | None = None,
    max_problems: int | None = None,
) -> tuple[list[str], dict[str, Any] | None]:
    """Pass 1, resumable: (problems found, None) at the end of the file, or (problems found
    so far, where to resume) when `stop()` said so at a member loop (INS). `resume`: such a
    point, `stream` starting at its byte offset. `ack`: acknowledges what it reads (kept
    only if the file is rejected: the members pass acknowledges an accepted one).
    `max_problems`: (problems, None) as soon as that many are found, the rest unread: the
    file is rejected whole anyway, and junk (noise after an ISA: a problem per segment, no
    INS to checkpoint at) would otherwise be read to its end in one go, its problems held."""
    limits = limits or ReadLimits()
    problems: list[str] = []
    in_member = False
    header = Header(limits.max_loop_segments)
    lines = LineIndex(resume)
    for seg in segments(stream, problems, lines, resume, envelope_only=True, ack=ack):
        if seg.seg_id == "INS" and not seg.replayed and stop is not None and stop():
            prefix = header.prefix()
            point = lines.resume_point(seg.number, prefix) if prefix else None
            if point is not None:
                return problems, point
        header.see(seg)
        if header.too_long is not None:
            problems.append(f"segment {header.too_long} (ST): the transaction set's header has "
                            f"more than {limits.max_loop_segments} segments before its first "
                            "INS (IMPORT_MAX_LOOP_SEGMENTS)")  # fmt: skip
            header.too_long = None
        if seg.seg_id == "INS":
            in_member = True
        elif seg.seg_id in ENVELOPE:
            in_member = False
        if seg.errors and not in_member:
            problems.extend(f"segment {seg.number} ({seg.seg_id}): {e}" for e in seg.errors)
        if max_problems is not None and len(problems) >= max_problems:
            return problems, None
    return problems, None


def read_834(
    stream: TextSource,
    facts: FileFacts | None = None,
    resume: dict[str, Any] | None = None,
    *,
    limits: ReadLimits | None = None,
    ack: SegmentListener | None = None,
) -> Iterator[SourceRecord]:
    """Pass 2: one record per member loop, in file order. Call only on a file
    `check_envelope` passed. A family's loops are held until the family ends (ids of
    dependents depend on their siblings), so memory is one family, not the file
    (`Families`; at most IMPORT_MAX_FAMILY_DEPENDENTS dependents, each loop at most
    IMPORT_MAX_LOOP_SEGMENTS segments).

    The last record of a family carries where to resume after it (`SourceRecord.resume`:
    before the next family's INS, with the set's header to replay); `resume` given such a
    point, with `stream` starting at its byte offset, carries on there, in the middle of
    the transaction set. Other records carry None (a family is read whole), except in a
    family over its cap, where every record carries one. `ack`: acknowledges the file."""
    limits = limits or ReadLimits()
    facts = facts if facts is not None else FileFacts()
    problems: list[str] = []
    families = Families(limits, resume.get("family") if resume else None)
    member: MemberLoop | None = None
    lines = LineIndex(resume)
    header = Header(limits.max_loop_segments)
    errh = SegmentErrors(skip_member_elements=families.overflow)
    for seg in segments(stream, problems, lines, resume, ack=ack, errh=errh):
        point: dict[str, Any] | None = None
        if seg.seg_id == "INS":
            prefix = header.prefix()
            point = lines.resume_point(seg.number, prefix) if prefix else None
            if point is not None:
                point["facts"] = {"transaction_sets": facts.transaction_sets,
                                  "effective": _iso(facts.effective)}  # fmt: skip
        if member is not None and (seg.seg_id == "INS" or seg.seg_id in ENVELOPE):
            yield from families.loop_ended(member, point)
            member = None
        if seg.seg_id in ENVELOPE and not seg.replayed:
            yield from families.end()
        elif seg.seg_id == "INS" and seg.data is not None and seg.data.get_value("INS01") == "Y":
            yield from families.end(point)  # a subscriber: the family before it has ended
        # a family with a subscriber over its cap: each dependent loop after the INS is
        # certainly its (a family without one is joined by REF*0F, known later)
        errh.skip_member_elements = families.overflow and families.subscriber
        header.see(seg)
        if seg.seg_id == "INS":
            member = MemberLoop(seg.number, line=lines.line_of(seg.number),
                                 limit=limits.max_loop_segments, start=point)  # fmt: skip
        if member is not None:
            member.add(seg)
        elif seg.data is not None:
            read_header(seg, facts)
            if seg.replayed and seg.seg_id == "ST" and resume is not None:
                facts.transaction_sets = int(resume["facts"]["transaction_sets"])
    if member is not None:
        yield from families.loop_ended(member, None)
    yield from families.end()
    if problems:
        raise SourceFileError(f"envelope errors: {'; '.join(problems[:MAX_REASONS])}")


def _iso(day: date | None) -> str | None:
    return day.isoformat() if day is not None else None
