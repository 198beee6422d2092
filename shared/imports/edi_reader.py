"""X12 834 benefit enrollment files (005010X220A1, and 004010X095A1), read as the guide means.

pyx12 walks every segment against the 834 implementation guide map (loops, usage, codes,
dates, lengths) as it streams; this module groups its segments into member loops (2000,
starting at INS) and reads each as a `Change`, by loop (the map path), not by segment
name alone:

    maintenance     INS03: 001 change, 021 addition, 024 cancellation or termination,
                    025 reinstatement, 030 audit (applied by `maintenance.apply`)
    member id       see `resolve_ids` (subscriber: REF*0F; dependents: how real files
                    identify them; one without an id of its own by its hashed identity,
                    `dependents.py`)
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

Reading a file takes two passes (two streamed downloads, memory stays flat):
`check_envelope` first: an ISA/GS/ST-level error, a missing trailer (a truncated file),
bytes after the last segment, or an error outside any member loop rejects the whole file,
as an X12 acknowledgment would reject the transaction set. Only an intact file gets the
second pass, `read_834`, where a member loop with any pyx12 error is rejected on its own.
pyx12 messages can quote element values (a birth date), so quoted values are masked.
Records carry the segment number of their INS and the physical line it starts on.
Whitespace between segments ("~ " then a line break) is read as EDI translators write it
(`_Spacing`). Both passes tell an `AckWriter` what they read (`acks.py`).

Bounds (`ReadLimits`, from the app settings): a family is held until it ends, so at most
IMPORT_MAX_FAMILY_DEPENDENTS dependents (`_Families`: beyond, each member is rejected as
it is read, with a resume point of its own); a member loop keeps at most
IMPORT_MAX_LOOP_SEGMENTS segments (a longer one is rejected), so does a set's header (the
file is rejected); a segment longer than MAX_SEGMENT_CHARS rejects the file.

Speed (pyx12 is most of an 834's import time): the envelope pass does not run pyx12's element
validation on segments inside member loops, whose errors it discards anyway (the members
pass runs it on every segment); and three pyx12 internals are replaced, process-wide, by
versions that give the same results faster (`_validate_segment`, `_parse_refdes`, and
`_NodeCounter`, its loop counter keyed by path text). tests/imports/test_834_fast_paths.py
checks both passes against pyx12's own code on good and broken files.
"""

from __future__ import annotations

import functools
import re
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Protocol

import pyx12.error_handler
import pyx12.errors
import pyx12.map_if
import pyx12.map_walker
import pyx12.nodeCounter
import pyx12.params
import pyx12.path
import pyx12.segment
import pyx12.x12context

from shared.imports.acks import AckErrors, AckWriter
from shared.imports.config import DEFAULT_MAX_FAMILY_DEPENDENTS, DEFAULT_MAX_LOOP_SEGMENTS
from shared.imports.dependents import DependentKey, derived_member_id, identity_digest, normal_name
from shared.imports.records import Change, Coverage, CoverageChange, SourceFileError, SourceRecord
from shared.imports.text_stream import byte_length, has_undecodable
from shared.imports.validation import member_id_of

_D8 = re.compile(r"\d{8}")


class TextSource(Protocol):
    """What the reader needs from a stream: `read(n)` (a `ChunkedText`, a `StringIO`)."""

    def read(self, size: int = -1, /) -> str: ...


MAX_REASONS = 5


@dataclass
class _Segment:
    seg_id: str
    number: int
    text: str
    path: str
    data: Any
    errors: list[str]
    replayed: bool = False  # a header segment put back in front of a resumed stream


def _mask(message: str, value: object) -> str:
    if isinstance(value, str) and value.strip():
        message = message.replace(value, "…")
    return _QUOTED_SEGMENT.sub(r"\1", message)


#: A segment quoted in pyx12's message ("Segment N3*17 MAIN ST not found": its first element,
#: or all of an HL): only its id is kept, since the element may be a member's address or name.
_QUOTED_SEGMENT = re.compile(r"\b([A-Z][A-Z0-9]{1,2})\*[^\s]*(?:\s[^\s.]+)*?(?= not found)")


#: The member loop's id in the 834 maps (005010X220A1 and 004010X095A1): every segment from
#: an INS to the next INS or SE is in it or in one of its child loops.
_MEMBER_LOOP = "2000"


class _Errors(AckErrors):
    """The error list of a pass. `skip_member_elements`: pyx12's element validation is not
    run on segments inside member loops (`_validate_segment`); loop structure (the map
    walk: which loop a segment opens, segment and loop counts, usage) is still checked on
    every segment. Set for the whole envelope pass, which discards errors of segments
    inside member loops (the members pass validates and rejects each loop on its own), and
    by the members pass while it reads a family over IMPORT_MAX_FAMILY_DEPENDENTS, whose
    every loop is rejected anyway: refusing such a family costs a walk, not a validation
    (its acknowledgment then reports the loops' structure errors only)."""

    def __init__(self, *, skip_member_elements: bool = False) -> None:
        super().__init__()
        self.skip_member_elements = skip_member_elements


_validate_every_segment = pyx12.x12context.apply_segment_errors


def _validate_segment(node: Any, seg_data: Any, errh: Any) -> bool:
    """pyx12's per-segment element validation (`apply_segment_errors`), skipped only for a
    segment in a member loop read by the envelope pass (whose errors it discards)."""
    if getattr(errh, "skip_member_elements", False) and _MEMBER_LOOP in node.x12path.loop_list:
        return True
    return bool(_validate_every_segment(node, seg_data, errh))


@functools.lru_cache(maxsize=1024)
def _refdes(ref_des: str) -> tuple[str | None, int | None, int | None]:
    path = pyx12.path.X12Path(ref_des)
    ele = path.ele_idx - 1 if path.ele_idx is not None else None
    sub = path.subele_idx - 1 if path.subele_idx is not None else None
    return path.seg_id, ele, sub


def _parse_refdes(self: Any, ref_des: str) -> tuple[int | None, int | None]:
    """`Segment._parse_refdes` with the reference designator's parse cached: pyx12 parses
    the same few designators ("03", "DTP02") millions of times in a large file."""
    seg_id, ele, sub = _refdes(ref_des)
    if seg_id is not None and seg_id != self.seg_id:
        raise pyx12.errors.EngineError(
            f"Invalid Reference Designator: {ref_des}, seg_id: {self.seg_id}"
        )
    return ele, sub


@functools.lru_cache(maxsize=1024)
def _path_text(path: str) -> str:
    return str(pyx12.path.X12Path(path).format())


_TEXT = "_imports_text"  # where a map node's X12Path keeps its formatted text


def _text_of(xpath: str | pyx12.path.X12Path) -> str:
    """An X12Path's text (what pyx12's `X12Path.__hash__` formats on every dict lookup),
    formatted once per path: the walker passes the map nodes' own paths, which it never
    changes, or path strings."""
    if isinstance(xpath, str):
        return _path_text(xpath)
    text = xpath.__dict__.get(_TEXT)
    if text is None:
        text = xpath.format()
        setattr(xpath, _TEXT, text)
    return str(text)


class _NodeCounter(pyx12.nodeCounter.NodeCounter):  # type: ignore[misc]
    """pyx12's loop and segment counter (how many times each loop and segment has repeated
    where the walker is: max repeats, required loops), keyed by the path's text instead of
    an X12Path, which hashes by formatting itself: same counts, same resets."""

    def __init__(self, initialCounts: Any = None) -> None:
        self._counts: dict[str, int] = {}
        for key, count in (initialCounts or {}).items():
            self._counts[_text_of(key)] = count

    def reset_to_node(self, xpath: str | pyx12.path.X12Path) -> None:
        """Forget the counts of every path below `xpath` (X12Path.is_child_path's test)."""
        root = _text_of(xpath).split("/")
        size = len(root)
        for key in [k for k in self._counts if _is_below(root, size, k)]:
            del self._counts[key]

    def increment(self, xpath: str | pyx12.path.X12Path) -> None:
        key = _text_of(xpath)
        self._counts[key] = self._counts.get(key, 0) + 1

    def setCount(self, xpath: str | pyx12.path.X12Path, ct: int) -> None:
        self._counts[_text_of(xpath)] = ct

    def get_count(self, xpath: str | pyx12.path.X12Path) -> int:
        return self._counts.get(_text_of(xpath), 0)

    def getState(self) -> Any:
        from collections import OrderedDict

        return OrderedDict((pyx12.path.X12Path(k), v) for k, v in self._counts.items())


def _is_below(root: list[str], size: int, key: str) -> bool:
    child = key.split("/")
    return len(child) > size and child[:size] == root


# Installed once for the process; each keeps pyx12's results (see their docstrings).
pyx12.x12context.apply_segment_errors = _validate_segment
pyx12.segment.Segment._parse_refdes = _parse_refdes
pyx12.map_walker.NodeCounter = _NodeCounter


def _drain(errh: AckErrors) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """(envelope-level errors, segment/element errors, envelope errors as (level, X12
    code)) collected since the last drain."""
    envelope = [f"{code}: {text}" for code, text in errh.err_isa + errh.err_gs + errh.err_st]
    levels = (("isa", errh.err_isa), ("gs", errh.err_gs), ("st", errh.err_st))
    coded = [(level, code) for level, found in levels for code, _ in found]
    segment = [_mask(f"{code}: {text}", value) for code, text, value in errh.err_seg]
    segment += [
        _mask(f"{refdes or 'element'}: {text}", value) for code, text, value, refdes in errh.err_ele
    ]
    errh.reset()
    return envelope, segment, coded


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


def _segments(
    stream: TextSource,
    envelope_errors: list[str],
    lines: _LineIndex | None = None,
    resume: dict[str, Any] | None = None,
    *,
    envelope_only: bool = False,
    ack: AckWriter | None = None,
    errh: _Errors | None = None,
) -> Iterator[_Segment]:
    """pyx12's segments with their own errors; envelope errors are appended as they appear.

    `envelope_only` (the envelope pass): segments inside member loops come without their
    element errors and text (that pass uses neither; see `_Errors`). `errh`: the error list
    to use (the members pass sets its `skip_member_elements` in a family over its cap).

    Envelope segments' elements (ISA, GS, ST, SE, GE, IEA) are validated too, as pyx12's
    own validation (`x12n_document`) does and its streaming reader does not. Whitespace
    between segments (after a segment terminator: "~ " and a line break) is no error: it
    is dropped before pyx12 reads the segments (`_Spacing`), as EDI translators do.

    `ack`: told about every segment read (not the replayed ones), to acknowledge the file.

    `resume`: a resume point (`_LineIndex.resume_point`); `stream` then starts at its byte
    offset. Its header segments (ISA, GS, ST and the set's header) are replayed in front,
    so pyx12 is in the same loop of the same transaction set, and its counters (segment
    number, segments in the set, sets in the group, control numbers seen) are set to what
    they were there: the SE, GE and IEA counts are checked as if it had read from the top.
    """
    if resume is None:
        first = stream.read(3)
        if not first:
            raise SourceFileError("empty file")
        if first != "ISA":
            raise SourceFileError("not an X12 interchange: the file does not start with ISA")
        source = _Prefixed(first, stream, lines)
        replay = 0
    else:
        prefix = "".join(resume["prefix"])
        source = _Prefixed(prefix, stream, lines, feed_prefix=False)
        replay = len(resume["prefix"])
    if errh is None:
        errh = _Errors(skip_member_elements=envelope_only)
    params = pyx12.params.params()
    try:
        reader = pyx12.x12context.X12ContextReader(params, errh, source)
    except SourceFileError:
        raise
    except pyx12.errors.X12Error as error:
        # pyx12's message quotes only the ISA header (sender/receiver ids, no member data)
        raise SourceFileError(f"not a valid X12 interchange header: {error}") from None
    except _PARSER_FAILURES as error:
        raise SourceFileError(
            f"not a valid X12 interchange header: {type(error).__name__}"
        ) from None
    if lines is not None:
        lines.counters = lambda: _counters(reader.src)
    try:
        for node in reader.iter_segments():
            seg = node.seg_data
            map_node = node.x12_map_node
            seg_id = seg.get_seg_id() if seg is not None else ""
            if seg_id in _ENVELOPE and isinstance(map_node, pyx12.map_if.segment_if):
                _validate_every_segment(map_node, seg, errh)
            envelope, errors, coded = _drain(errh)
            envelope_errors.extend(envelope)
            member = map_node is not None and _MEMBER_LOOP in map_node.x12path.loop_list
            skip = envelope_only and member
            text = seg.format() if seg is not None and not skip else ""
            if has_undecodable(text):
                errors.append("segment is not valid UTF-8")
            nodes, element_codes = errh.take()
            if ack is not None and replay == 0:
                ack.segment(int(node.cur_line_number or 0), seg_id, seg, in_member=member,
                            has_errors=bool(errors), nodes=nodes,
                            coded=coded + element_codes)  # fmt: skip
            yield _Segment(
                seg_id=seg_id,
                number=int(node.cur_line_number or 0),
                text=text,
                path=map_node.get_path() if map_node is not None else "",
                data=seg,
                errors=errors,
                replayed=replay > 0,
            )
            if replay > 0:
                replay -= 1
                if replay == 0 and resume is not None:
                    _restore_counters(reader.src, resume["x12"])
        reader.src.cleanup()  # missing SE / GE / IEA: a truncated file
        errh.handle_errors(reader.src.pop_errors())
        errh.flush()
        envelope, errors, coded = _drain(errh)
        envelope_errors.extend(envelope + errors)
        nodes, element_codes = errh.take()
        if ack is not None:
            ack.end_of_file(nodes, coded + element_codes)
        leftover = reader.src.raw.buffer.strip()
        if leftover:
            envelope_errors.append(f"{len(leftover)} character(s) after the last segment")
    except SourceFileError:
        raise
    except _PARSER_FAILURES as error:
        raise SourceFileError(f"pyx12 could not parse the file: {type(error).__name__}") from None


def _counters(src: Any) -> dict[str, Any]:
    """pyx12's reader counters as they were just before the INS it has just read."""
    return {
        "cur_line": src.cur_line - 1,
        "seg_count": src.seg_count - 1,
        "gs_count": src.gs_count,
        "st_count": src.st_count,
        "isa_ids": list(src.isa_ids),
        "gs_ids": list(src.gs_ids),
        "st_ids": list(src.st_ids),
    }


def _restore_counters(src: Any, counters: dict[str, Any]) -> None:
    for name, value in counters.items():
        setattr(src, name, list(value) if isinstance(value, list) else int(value))


class _Prefixed:
    """A stream with its first characters (already read to sniff the format) put back;
    what pyx12 reads is also shown to `lines`, which notes where each segment starts."""

    def __init__(
        self,
        prefix: str,
        stream: TextSource,
        lines: _LineIndex | None = None,
        *,
        feed_prefix: bool = True,
    ) -> None:
        """`feed_prefix` False: the prefix is not the file's (a resumed stream's replayed
        header), so `lines` sees only what comes from `stream`."""
        self._prefix = prefix
        self._stream = stream
        self._lines = lines
        self._feed_prefix = feed_prefix
        self._spacing = _Spacing()
        self.closed = False

    def read(self, size: int = -1) -> str:
        """What pyx12 reads, whitespace between segments dropped (`_Spacing`); never ""
        before the end of the stream (pyx12 takes an empty answer for the end)."""
        while True:
            head, text = self._read(size)
            if self._lines is not None:
                if self._feed_prefix and head:
                    self._lines.feed(head)
                if text:
                    self._lines.feed(text)
            raw = head + text
            spaced = self._spacing(raw)
            if spaced or not raw or size == 0:
                return spaced

    def _read(self, size: int) -> tuple[str, str]:
        if not self._prefix:
            return "", self._stream.read(size)
        if size < 0:
            head, self._prefix = self._prefix, ""
            return head, self._stream.read()
        head, self._prefix = self._prefix[:size], self._prefix[size:]
        return head, (self._stream.read(size - len(head)) if size > len(head) else "")


_NOT_SPACE = re.compile(r"\S")
ISA_LENGTH = 106  # the ISA segment is fixed length; its last character ends every segment
#: Whitespace EDI translators put between segments (after a terminator): "~ " then a line
#: break, "~\r\n", a tab.
_BETWEEN = " \t\r\n"
#: A segment longer than this is no 834 segment (its longest elements hold 80 characters,
#: its longest segments a few hundred): its terminator is missing. pyx12 takes a segment it
#: has not seen the end of within 8 KiB for the end of the file (and reports the file
#: truncated); the file is rejected first, with this reason.
MAX_SEGMENT_CHARS = 4096


class _Spacing:
    """Drops whitespace between segments from the text pyx12 reads: pyx12 strips only line
    breaks after a terminator, and reports a segment starting with a space as an error
    ("segment contains a leading space") that would reject the whole file. The ISA (the
    first 106 characters, whose elements are padded with spaces) passes unchanged; its
    last character is the segment terminator."""

    def __init__(self) -> None:
        self._seen = 0
        self._terminator: str | None = None
        self._pattern: re.Pattern[str] | None = None
        self._after = False  # the last character passed on was a terminator

    def __call__(self, text: str) -> str:
        if self._terminator is None:
            need = ISA_LENGTH - self._seen
            if len(text) < need:
                self._seen += len(text)
                return text
            isa, rest = text[:need], text[need:]
            self._seen = ISA_LENGTH
            self._terminator = isa[-1]
            self._pattern = re.compile(re.escape(self._terminator) + f"[{_BETWEEN}]+")
            self._after = True
            return isa + self._strip(rest)
        return self._strip(text)

    def _strip(self, text: str) -> str:
        if not text:
            return text
        assert self._pattern is not None and self._terminator is not None
        if self._after:
            text = text.lstrip(_BETWEEN)
            if not text:
                return ""
        text = self._pattern.sub(lambda _: self._terminator or "", text)
        self._after = text.endswith(self._terminator)
        return text


class _LineIndex:
    """The physical line each segment starts on, for the segments pyx12 has read but not yet
    handed out (so memory is pyx12's read-ahead, not the file). Segments are counted as pyx12
    counts them: non-empty, terminated by the character after ISA16."""

    def __init__(self, resume: dict[str, Any] | None = None) -> None:
        self._terminator: str | None = None
        self._head = ""
        self._line = 1
        self._count = 0
        self._byte = 0  # file offset of the text being fed
        self._in_segment = False
        self._segment_chars = 0  # of the segment being read
        self._starts: deque[tuple[int, int, int]] = deque()
        #: pyx12's counters now (set by `_segments`), for a resume point.
        self.counters: Any = None
        if resume is not None:
            self._terminator = resume["prefix"][0][ISA_LENGTH - 1]
            self._line, self._count = int(resume["line"]), int(resume["segment"]) - 1
            self._byte = int(resume["offset"])

    def feed(self, text: str) -> None:
        if self._terminator is None:
            self._head += text
            if len(self._head) < ISA_LENGTH:
                return
            self._terminator, text, self._head = self._head[ISA_LENGTH - 1], self._head, ""
        start = self._byte
        self._byte += byte_length(text)
        ascii_text = text.isascii()
        pos, size = 0, len(text)
        while pos < size:
            if not self._in_segment:
                found = _NOT_SPACE.search(text, pos)
                if found is None:
                    self._line += text.count("\n", pos)
                    return
                self._line += text.count("\n", pos, found.start())
                pos = found.start()
                if text[pos] == self._terminator:
                    pos += 1  # an empty segment
                    continue
                self._count += 1
                self._in_segment = True
                self._segment_chars = 0
                at = start + (pos if ascii_text else byte_length(text[:pos]))
                self._starts.append((self._count, self._line, at))
            end = text.find(self._terminator, pos)
            self._segment_chars += (size if end < 0 else end) - pos
            if self._segment_chars > MAX_SEGMENT_CHARS:
                raise SourceFileError(
                    f"segment {self._count} (line {self._line}) is longer than "
                    f"{MAX_SEGMENT_CHARS} characters: is its terminator missing?"
                )
            if end < 0:
                self._line += text.count("\n", pos)
                return
            self._line += text.count("\n", pos, end)
            pos, self._in_segment = end + 1, False

    def line_of(self, segment: int) -> int:
        """The line segment number `segment` starts on (0 if unknown); forgets earlier ones."""
        found = self._start(segment)
        return found[1] if found else 0

    def _start(self, segment: int) -> tuple[int, int, int] | None:
        while self._starts and self._starts[0][0] < segment:
            self._starts.popleft()
        if self._starts and self._starts[0][0] == segment:
            return self._starts[0]
        return None

    def resume_point(self, segment: int, prefix: list[str]) -> dict[str, Any] | None:
        """Where to resume just before INS segment `segment`, which pyx12 has just read
        (None if unknown): its byte offset, line and number, the header segments to replay
        (`prefix`) and pyx12's counters."""
        found = self._start(segment)
        if found is None or self.counters is None:
            return None
        return {"offset": found[2], "line": found[1], "segment": segment,
                "prefix": prefix, "x12": self.counters()}  # fmt: skip

    def close(self) -> None:
        self.closed = True


@dataclass(frozen=True)
class ReadLimits:
    """The reader's caps (app settings, `config.ImportSettings`) and the key of dependents'
    identity digests."""

    max_family_dependents: int = DEFAULT_MAX_FAMILY_DEPENDENTS
    max_loop_segments: int = DEFAULT_MAX_LOOP_SEGMENTS
    id_key: bytes = field(default=b"", repr=False)


class _Header:
    """The envelope and header segments the reader is inside (ISA, GS, ST and the set's
    header up to its first INS): what a resumed stream replays in front of itself. A header
    longer than `limit` segments is not kept (`too_long`; the envelope pass rejects it)."""

    def __init__(self, limit: int = DEFAULT_MAX_LOOP_SEGMENTS) -> None:
        self.isa: str | None = None
        self.gs: str | None = None
        self.st: list[str] | None = None
        self._open = False
        self._st_number = 0
        self.limit = limit
        self.too_long: int | None = None  # the ST segment's number of a header over the limit

    def see(self, seg: _Segment) -> None:
        seg_id = seg.seg_id
        if seg_id == "ISA":
            self.isa, self.gs, self.st = seg.text, None, None
        elif seg_id == "GS":
            self.gs, self.st = seg.text, None
        elif seg_id == "ST":
            self.st, self._open, self._st_number = [seg.text], True, seg.number
        elif seg_id == "SE":
            self.st = None
        elif seg_id == "GE":
            self.gs = None
        elif seg_id == "IEA":
            self.isa = None
        elif seg_id == "INS":
            self._open = False
        elif self._open and self.st is not None:
            if len(self.st) >= self.limit:
                self.too_long, self._open = self._st_number, False
                return
            self.st.append(seg.text)

    def prefix(self) -> list[str] | None:
        """What to replay before a resumed INS (None: not inside a transaction set)."""
        if self.isa is None or self.gs is None or self.st is None:
            return None
        return [self.isa, self.gs, *self.st]


def check_envelope(stream: TextSource) -> list[str]:
    """Pass 1: why the file must be rejected as a whole; [] when it may be imported."""
    return scan_envelope(stream)[0]


def scan_envelope(
    stream: TextSource,
    resume: dict[str, Any] | None = None,
    stop: Callable[[], bool] | None = None,
    *,
    limits: ReadLimits | None = None,
    ack: AckWriter | None = None,
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
    header = _Header(limits.max_loop_segments)
    lines = _LineIndex(resume)
    for seg in _segments(stream, problems, lines, resume, envelope_only=True, ack=ack):
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
        elif seg.seg_id in ("SE", "GE", "IEA", "ST", "GS", "ISA"):
            in_member = False
        if seg.errors and not in_member:
            problems.extend(f"segment {seg.number} ({seg.seg_id}): {e}" for e in seg.errors)
        if max_problems is not None and len(problems) >= max_problems:
            return problems, None
    return problems, None


@dataclass
class _CoverageLoop:
    number: int
    maintenance: str
    line: str
    plan: str
    level: str
    begin: date | None = None
    end: date | None = None


#: Record categories of loops rejected by a cap (the report counts rejections by category).
FAMILY_SIZE = "family_size"
LOOP_SIZE = "loop_size"


@dataclass
class _MemberLoop:
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
    coverages: list[_CoverageLoop] = field(default_factory=list)
    member_id: str = ""
    id_error: str | None = None
    dependent: DependentKey | None = None

    def _error(self, text: str) -> None:
        self.error_count += 1
        if len(self.errors) < MAX_REASONS:
            self.errors.append(text)

    def add(self, seg: _Segment) -> None:
        self.segment_count += 1
        if self.segment_count > self.limit:
            return  # rejected by `record()`; nothing more kept
        self.segments.append(seg.text)
        for e in seg.errors:
            self._error(f"segment {seg.number} ({seg.seg_id}): {e}")
        value = seg.data.get_value if seg.data is not None else (lambda _: None)
        loop = _loop_of(seg.path)
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
                qualifier, when = value("DTP01"), _dates(value("DTP02"), value("DTP03"))
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
                self.birth = _dates("D8", value("DMG02"))[0]
            elif loop == "2100B" and seg.seg_id == "NM1":  # NM101 70: the incorrect name
                self.corrected = True
                self.previous_first_name = value("NM104") or None
            elif loop == "2100B" and seg.seg_id == "DMG" and value("DMG01") == "D8":
                self.corrected = True
                self.previous_birth = _dates("D8", value("DMG02"))[0]
            elif loop == "2300" and seg.seg_id == "HD":
                self.coverages.append(_CoverageLoop(
                    seg.number, value("HD01") or "", value("HD03") or "",
                    (value("HD04") or "").strip(), value("HD05") or "",
                ))  # fmt: skip
            elif loop == "2300" and seg.seg_id == "DTP" and self.coverages:
                qualifier, (begin, end) = value("DTP01"), _dates(value("DTP02"), value("DTP03"))
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


def _loop_of(path: str) -> str:
    """The innermost loop of a pyx12 map path: ".../2000/2100A/NM1" -> "2100A"."""
    parts = path.rsplit("/", 2)
    return parts[-2] if len(parts) == 3 else ""


def _dates(fmt: str | None, value: str | None) -> tuple[date | None, date | None]:
    """(begin, end) of a D8 (both the same day) or RD8 (CCYYMMDD-CCYYMMDD) value."""
    text = value or ""
    if fmt == "RD8":
        first, _, last = text.partition("-")
        return _d8(first), _d8(last)
    day = _d8(text)
    return day, day


def _d8(text: str) -> date | None:
    if not _D8.fullmatch(text):
        raise ValueError("not a CCYYMMDD date")
    try:
        return date(int(text[:4]), int(text[4:6]), int(text[6:]))
    except ValueError:
        raise ValueError("not a valid calendar date") from None


def resolve_ids(family: list[_MemberLoop], key: bytes = b"") -> None:
    """Member ids of one family (a subscriber loop and the dependent loops after it).

    subscriber (INS01=Y): REF*0F, the subscriber identifier the guide requires.
    dependent (INS01=N), the first that applies:
      1. its own REF*0F when it differs from the subscriber's (the sender identifies each
         member there);
      2. REF*23 (client number);
      3. NM109 when NM108 is ZZ (a mutually defined member id); never an SSN (NM108=34);
      4. its identity (`dependents.py`): its REF*0F (the subscriber's id), INS02, birth date
         and first name, hashed: "{REF*0F}-{INS02}-{digest}". Two dependents of the family
         with the same identity (twins with one name, or one child sent twice) cannot be
         told apart: both are rejected, never merged into one member. A dependent without
         a birth date (DMG02) or a first name (NM104) cannot be identified: rejected.
    `key`: IMPORT_DEPENDENT_ID_KEY.
    """
    subscriber = next((m for m in family if m.subscriber), None)
    family_id = subscriber.ref_0f if subscriber is not None else ""
    derived: dict[str, list[_MemberLoop]] = {}
    for member in family:
        if member.subscriber:
            member.member_id = member.ref_0f
            if not member.member_id:
                member.id_error = "member_id: a subscriber (INS01=Y) needs REF*0F"
        elif subscriber is not None and member.ref_0f and member.ref_0f != family_id:
            member.member_id = member.ref_0f
        elif member.refs.get("23"):
            member.member_id = member.refs["23"]
        elif member.nm108 == "ZZ" and member.nm109:
            member.member_id = member.nm109
        elif member.ref_0f and member.relationship:
            _identify(member, key)
            if member.dependent is not None:
                derived.setdefault(member.dependent.digests[0], []).append(member)
        else:
            member.id_error = ("member_id: a dependent (INS01=N) needs REF*0F with INS02, "
                               "REF*23 or NM109 (NM108=ZZ)")  # fmt: skip
    for same in derived.values():
        if len(same) > 1:
            for member in same:
                member.id_error = (
                    f"member_id: {len(same)} dependents of one subscriber with relationship "
                    f"INS02={member.relationship}, the same birth date and the same first name, "
                    "and no id of their own (REF*23, NM109 with NM108=ZZ), cannot be told "
                    "apart (twins with one name?): the sender must identify them"
                )


def _identify(member: _MemberLoop, key: bytes) -> None:
    """A dependent's id from its identity (see `resolve_ids`, rule 4)."""
    first = member.first_name if member.first_name and normal_name(member.first_name) else None
    missing = [
        name
        for name, value in (
            ("birth date (2100A DMG02)", member.birth),
            ("first name (2100A NM104)", first),
        )
        if value is None
    ]
    if member.birth is None or first is None:
        member.id_error = (
            "member_id: a dependent with no id of its own (REF*23, NM109 with NM108=ZZ) is "
            "identified by its subscriber's REF*0F, INS02, birth date and first name; this "
            "one has no " + " and no ".join(missing)
        )
        return
    subscriber, relationship = member.ref_0f, member.relationship
    digests = [identity_digest(subscriber, relationship, member.birth, first, key)]
    if member.corrected:
        before = identity_digest(subscriber, relationship, member.previous_birth or member.birth,
                                 member.previous_first_name or first, key)  # fmt: skip
        if before != digests[0]:
            digests.append(before)
    member.dependent = DependentKey(subscriber, relationship, tuple(digests))
    member.member_id = derived_member_id(subscriber, relationship, digests[0])


@dataclass
class FileFacts:
    """What `read_834` learns about the file besides its members (filled as it reads)."""

    #: Header DTP*007 (file effective date), else BGN03, of the last transaction set.
    effective: date | None = None
    transaction_sets: int = 0


class _Families:
    """Groups member loops into families as they end, and yields their records.

    A family is a subscriber loop and the dependent loops after it; dependents sent without
    their subscriber (a newborn added on its own) form a family with the dependents after
    them that carry the same REF*0F. A family is held until it ends (a dependent's id
    depends on its siblings: `resolve_ids`), so memory is one family. A family with more
    than `max_family_dependents` dependents is not held: all of its members are rejected,
    those held at once and every later one as it ends; its records then carry a resume
    point each (with the family's state), so even a huge family checkpoints."""

    def __init__(self, limits: ReadLimits, saved: dict[str, Any] | None) -> None:
        self.limits = limits
        self.loops: list[_MemberLoop] = []
        self.key = ""  # REF*0F of a family without a subscriber
        self.subscriber = False
        self.dependents = 0
        self.overflow = False
        if saved:  # resumed inside a family over its cap
            self.overflow, self.key = True, str(saved.get("key") or "")
            self.subscriber, self.dependents = bool(saved.get("subscriber")), int(saved["size"])

    def _joins(self, loop: _MemberLoop) -> bool:
        if loop.subscriber or not (self.loops or self.overflow):
            return False
        return self.subscriber or loop.ref_0f == self.key

    def _too_big(self) -> str:
        return (f"family: more than {self.limits.max_family_dependents} dependents in one "
                "family (IMPORT_MAX_FAMILY_DEPENDENTS): every member of the family is "
                "rejected")  # fmt: skip

    def _overflow_point(self, point: dict[str, Any] | None) -> dict[str, Any] | None:
        if point is None:
            return None
        state = {"key": self.key, "subscriber": self.subscriber, "size": self.dependents}
        return {**point, "family": state}

    def loop_ended(
        self, loop: _MemberLoop, next_point: dict[str, Any] | None
    ) -> Iterator[SourceRecord]:
        """`loop` has ended; `next_point`: where a read could resume after it (before the
        next INS), or None."""
        if self._joins(loop):
            self.dependents += 1
            if self.overflow:
                yield loop.record(resume=self._overflow_point(next_point), error=self._too_big(),
                                  category=FAMILY_SIZE)  # fmt: skip
                return
            self.loops.append(loop)
            if self.dependents > self.limits.max_family_dependents:
                self.overflow = True
                held, self.loops = self.loops, []
                for member in held[:-1]:
                    yield member.record(error=self._too_big(), category=FAMILY_SIZE)
                yield held[-1].record(resume=self._overflow_point(next_point),
                                      error=self._too_big(), category=FAMILY_SIZE)  # fmt: skip
            return
        yield from self.end(loop.start)
        self.loops, self.subscriber, self.key = [loop], loop.subscriber, loop.ref_0f
        self.dependents = 0 if loop.subscriber else 1

    def end(self, resume: dict[str, Any] | None = None) -> Iterator[SourceRecord]:
        """The family ends (before a loop of another family, `resume` pointing there; or at
        the end of its transaction set, None): its records, the last one with `resume`."""
        family, self.loops = self.loops, []
        self.overflow, self.dependents, self.key, self.subscriber = False, 0, "", False
        if not family:
            return
        resolve_ids(family, self.limits.id_key)
        yield from (m.record() for m in family[:-1])
        yield family[-1].record(resume=resume)


def read_834(
    stream: TextSource,
    facts: FileFacts | None = None,
    resume: dict[str, Any] | None = None,
    *,
    limits: ReadLimits | None = None,
    ack: AckWriter | None = None,
) -> Iterator[SourceRecord]:
    """Pass 2: one record per member loop, in file order. Call only on a file
    `check_envelope` passed. A family's loops are held until the family ends (ids of
    dependents depend on their siblings), so memory is one family, not the file
    (`_Families`; at most IMPORT_MAX_FAMILY_DEPENDENTS dependents, each loop at most
    IMPORT_MAX_LOOP_SEGMENTS segments).

    The last record of a family carries where to resume after it (`SourceRecord.resume`:
    before the next family's INS, with the set's header to replay); `resume` given such a
    point, with `stream` starting at its byte offset, carries on there, in the middle of
    the transaction set. Other records carry None (a family is read whole), except in a
    family over its cap, where every record carries one. `ack`: acknowledges the file."""
    limits = limits or ReadLimits()
    facts = facts if facts is not None else FileFacts()
    problems: list[str] = []
    families = _Families(limits, resume.get("family") if resume else None)
    member: _MemberLoop | None = None
    lines = _LineIndex(resume)
    header = _Header(limits.max_loop_segments)
    errh = _Errors(skip_member_elements=families.overflow)
    for seg in _segments(stream, problems, lines, resume, ack=ack, errh=errh):
        point: dict[str, Any] | None = None
        if seg.seg_id == "INS":
            prefix = header.prefix()
            point = lines.resume_point(seg.number, prefix) if prefix else None
            if point is not None:
                point["facts"] = {"transaction_sets": facts.transaction_sets,
                                  "effective": _iso(facts.effective)}  # fmt: skip
        if member is not None and (seg.seg_id == "INS" or seg.seg_id in _ENVELOPE):
            yield from families.loop_ended(member, point)
            member = None
        if seg.seg_id in _ENVELOPE and not seg.replayed:
            yield from families.end()
        elif seg.seg_id == "INS" and seg.data is not None and seg.data.get_value("INS01") == "Y":
            yield from families.end(point)  # a subscriber: the family before it has ended
        # a family with a subscriber over its cap: each dependent loop after the INS is
        # certainly its (a family without one is joined by REF*0F, known later)
        errh.skip_member_elements = families.overflow and families.subscriber
        header.see(seg)
        if seg.seg_id == "INS":
            member = _MemberLoop(seg.number, line=lines.line_of(seg.number),
                                 limit=limits.max_loop_segments, start=point)  # fmt: skip
        if member is not None:
            member.add(seg)
        elif seg.data is not None:
            _header(seg, facts)
            if seg.replayed and seg.seg_id == "ST" and resume is not None:
                facts.transaction_sets = int(resume["facts"]["transaction_sets"])
    if member is not None:
        yield from families.loop_ended(member, None)
    yield from families.end()
    if problems:
        raise SourceFileError(f"envelope errors: {'; '.join(problems[:MAX_REASONS])}")


def _iso(day: date | None) -> str | None:
    return day.isoformat() if day is not None else None


_ENVELOPE = ("SE", "GE", "IEA", "ST", "GS", "ISA")


def _header(seg: _Segment, facts: FileFacts) -> None:
    value = seg.data.get_value
    try:
        if seg.seg_id == "ST":
            facts.transaction_sets += 1
            facts.effective = None
        elif seg.seg_id == "BGN" and facts.effective is None:
            facts.effective = _d8(value("BGN03") or "")
        elif seg.seg_id == "DTP" and _loop_of(seg.path) == "HEADER" and value("DTP01") == "007":
            facts.effective = _d8(value("DTP03") or "")
    except ValueError:
        pass  # pyx12 reported it; the file failed check_envelope
