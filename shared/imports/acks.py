"""X12 acknowledgments of every 834 file the import reads: a 999 (a 997 for an 004010 file),
and a TA1 when the interchange envelope is broken or the sender asked for one (ISA14=1).

    {account}/acks/{run_id}/{file}.999     (.997)  implementation acknowledgment
    {account}/acks/{run_id}/{file}.ta1             interchange acknowledgment

Written beside the file's report when the file is done: accepted, accepted with errors,
or rejected whole. The 999 reports what pyx12 finds validating the file against the 834
implementation guide, segment by segment: one AK2 per transaction set, an IK3 (and IK4 per
element) for each segment in error, exactly as pyx12's own 999 generator writes them (its
visitor, `error_999_visitor`, renders these segments here), then IK5 and AK9:

    IK5 / AK9   A   no error
                E   errors only in member loops: those members were rejected (each is in
                    the rejected file), the set's other members imported
                R   the set (group) was not imported: an error outside the member loops,
                    every member loop in error, or the file was rejected whole
                P   (AK9 only) some sets rejected, others accepted

pyx12 itself knows only A and R (its AK9 is R whenever it finds an error): where it says A
so does this 999; where it says R, this one says E, P or R by what was imported. AK902 and
AK903 (sets included and received) are pyx12's; AK904 counts the sets accepted (A or E).

What this module writes itself, and why not pyx12's: the envelope of the acknowledgment
(ISA, GS*FA, ST*999, AK1, AK9, SE, GE, IEA) and the TA1. pyx12 numbers them from the clock
and at random and keeps its counts in memory for one pass; an import spans invocations
(the document is staged in blocks, `staged_blob`, and its state kept in the run's
checkpoint), and a retried attempt must write the same numbers. The interchange control
number is derived from the file's key (run, name, version): the same for every attempt.

No bad value is ever copied into an IK4 (IK404, "copy of bad data element", left out):
the values in error are names, birth dates and ids. An application rule that rejects a
member (a birth date in the future, a dependent that cannot be identified, a family over
IMPORT_MAX_FAMILY_DEPENDENTS) is no X12 syntax error: it is reported in the rejected file
and the run report, not in the 999 (that is the 824's role).

The TA1 (interchange acknowledgment, TA104 A or R, TA105 the note code) is written when
ISA14 asks for it, or when the interchange itself is in error (then the interchange is
rejected whole and only the TA1 answers it: its groups are not acknowledged): its trailer
missing (023), its IEA control number (001) or group count (021) wrong, a duplicate ISA13
(025), an ISA or IEA element invalid (005 to 020, 027), or the file refused before it was
read (its size, IMPORT_MAX_FILE_BYTES: 024 "invalid interchange content"). A file that does not
start with a readable ISA header gets no acknowledgment at all: there is no interchange to
answer (its rejection is in the run report).

The reader calls an `AckWriter` as its `x12.stream.SegmentListener`, handing it pyx12's error
nodes (`x12.errors.SegmentErrors`); this module imports nothing of the reader.
"""

from __future__ import annotations

import functools
import hashlib
import io
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyx12.error_997
import pyx12.error_999

from shared.imports.staged_blob import StagedBlob

TERMINATOR = "~"
ELEMENT = "*"
COMPONENT = ":"
VERSION_999 = "005010X231A1"
ACCEPTED, ACCEPTED_WITH_ERRORS, PARTIAL, REJECTED = "A", "E", "P", "R"
#: Worst first: how a file with several groups is summed up.
_SEVERITY = {REJECTED: 3, PARTIAL: 2, ACCEPTED_WITH_ERRORS: 1, ACCEPTED: 0}

#: TA105 codes that reject the interchange (pyx12's 997 visitor puts these first).
_TA1_REJECTS = frozenset({"004", "005", "007", "010", "011", "012", "013", "014", "015", "016",
                          "017", "018", "022", "023", "024", "025", "026", "027"})  # fmt: skip
#: TA105 024: invalid interchange content (a file refused before it was read).
TA1_INVALID_CONTENT = "024"
#: TA105 022: invalid control structure (an ISA header pyx12 cannot read).
TA1_INVALID_STRUCTURE = "022"
#: TA105 017: invalid interchange version (ISA12 neither 00401 nor 00501).
TA1_INVALID_VERSION = "017"


def _visitor(kind: str, out: io.StringIO) -> Any:
    if kind == "997":
        return pyx12.error_997.error_997_visitor(out)
    return pyx12.error_999.error_999_visitor(out)


def _render(kind: str, call: Callable[[Any], None]) -> str:
    """What pyx12's 999 (997) visitor writes for one call, as text."""
    out = io.StringIO()
    call(_visitor(kind, out))
    return out.getvalue()


@dataclass
class _SetNode:
    """What pyx12's visitor reads of a transaction set (its `err_st`)."""

    trn_set_id: str
    trn_set_control_num: str
    vriic: str
    ack_code: str = ACCEPTED
    codes: list[str] = field(default_factory=list)
    bad_segments: int = 0

    @property
    def errors(self) -> list[tuple[str, str]]:
        return [(code, "") for code in dict.fromkeys(self.codes)]

    @property
    def elements(self) -> list[Any]:
        return []

    def child_err_count(self) -> int:
        return self.bad_segments


def control_number(file_key: str) -> int:
    """The acknowledgment's interchange control number (1 to 999,999,999), from the file's
    key: the same for every attempt at the same version of the same file in one run."""
    digest = hashlib.blake2b(file_key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % 999_999_999 + 1


def _segment(*elements: str) -> str:
    return ELEMENT.join(elements).rstrip(ELEMENT) + TERMINATOR + "\n"


def _isa(isa: dict[str, str], control: int, when: datetime) -> str:
    """Our ISA, answering `isa` (the received one's fields): sender and receiver swapped."""
    version = isa.get("ISA12", "00501")
    repetition = "^" if version >= "00501" else "U"
    fields = [
        "ISA", "00", " " * 10, "00", " " * 10,
        isa.get("ISA07", "ZZ"), isa.get("ISA08", "").ljust(15)[:15],
        isa.get("ISA05", "ZZ"), isa.get("ISA06", "").ljust(15)[:15],
        when.strftime("%y%m%d"), when.strftime("%H%M"), repetition, version,
        f"{control:09d}", "0", isa.get("ISA15", "P") or "P", COMPONENT,
    ]  # fmt: skip
    return ELEMENT.join(fields) + TERMINATOR + "\n"


def loose_isa(text: str) -> dict[str, str] | None:
    """The fields of an ISA header read without pyx12 (for a TA1 when pyx12 cannot read
    it): None unless `text` starts with "ISA" and carries at least 16 elements."""
    if not text.startswith("ISA") or len(text) < 4:
        return None
    separator = text[3]
    parts = text[:106].split(separator)
    if len(parts) < 17 or not parts[13].strip():
        return None
    return {f"ISA{i:02d}": parts[i].strip() for i in range(1, 17)}


def ta1_document(isa: dict[str, str], control: int, code: str, when: datetime) -> str:
    """A TA1 interchange acknowledgment of the received interchange `isa`."""
    accept = "A" if code == "000" else "R"  # any error rejects the file, so the interchange
    ta1 = _segment("TA1", isa.get("ISA13", ""), isa.get("ISA09", ""), isa.get("ISA10", ""),
                   accept, code)  # fmt: skip
    return _isa(isa, control, when) + ta1 + _segment("IEA", "0", f"{control:09d}")


def write_ta1(blob: Any, isa: dict[str, str], control: int, code: str,
              when: datetime | None = None) -> str:  # fmt: skip
    """Upload a TA1 answering `isa` with note `code` to `blob`; returns its name."""
    text = ta1_document(isa, control, code, when or datetime.now(UTC))
    blob.upload_blob(text.encode("ascii", "replace"), overwrite=True)
    return str(blob.blob_name)


@dataclass
class AckOutcome:
    """What was acknowledged: `kind` 999 or 997 (None: no functional acknowledgment),
    `code` the AK901 (the worst of the file's groups), `ta1` the TA105 note code if a TA1
    was written, and the blob names written."""

    kind: str | None = None
    code: str | None = None
    ta1: str | None = None
    blobs: list[str] = field(default_factory=list)

    def summary(self) -> str:
        parts = [f"{self.kind} {self.code}"] if self.kind and self.code else []
        if self.ta1:
            parts.append(f"TA1 {'A' if self.ta1 == '000' else 'R'} {self.ta1}")
        return ", ".join(parts) or "none"


class AckWriter:
    """Builds one file's acknowledgments as the reader streams it (see the module doc).

    `rejecting`: every set and group is acknowledged R (the envelope pass: its document is
    committed only when the file is rejected whole). `state`: what `stage()` returned at the
    last checkpoint, to carry on from."""

    def __init__(
        self,
        blob_for: Callable[[str], Any],
        file_key: str,
        *,
        rejecting: bool = False,
        state: dict[str, Any] | None = None,
    ) -> None:
        """`blob_for(kind)`: the BlobClient of the document `kind` ("999", "997", "ta1")."""
        state = dict(state or {})
        blocks = int(state.pop("blocks", 0))
        self._blob_for = blob_for
        self.rejecting = rejecting
        self.s: dict[str, Any] = state or {
            "kind": None, "isa": None, "control": control_number(file_key), "head": False,
            "ta1_requested": False, "ta1_codes": [], "st999": 0, "segments": 0,
            "group": None, "set": None, "results": [],
        }  # fmt: skip
        self._queue: deque[tuple[tuple[float, int], tuple[Any, ...]]] = deque()
        self._blob: StagedBlob | None = None
        if self.s["kind"] is not None:
            self._blob = StagedBlob(blob_for(self.s["kind"]), blocks=blocks)

    # -- events from the reader ----------------------------------------------------------------
    def segment(
        self,
        number: int,
        seg_id: str,
        data: Any,
        *,
        in_member: bool,
        has_errors: bool,
        nodes: list[Any],
        coded: list[tuple[str, str]],
    ) -> None:
        """Segment `number` read (not a replayed one): its finished error nodes (those of
        the segments before it), whether it had errors (a member loop with errors is
        rejected), its envelope errors (level, code).

        Queued, not yet applied: the reader reads ahead of the records the import has
        done, and a checkpoint must hold the acknowledgment as it was at its resume point
        (before an INS); `apply_until` and `stage(until=...)` apply what comes before it."""
        if nodes or coded or seg_id == "INS" or seg_id in _ENVELOPE:  # else nothing to do
            self._queue.append(((number, 0), (seg_id, _values(seg_id, data), nodes, coded)))
        if seg_id == "INS":  # the loop it starts: after the resume point at this INS
            self._queue.append(((number, 1), ("INS+", in_member, has_errors)))
        elif in_member and has_errors:
            self._queue.append(((number, 0), ("BAD",)))

    def end_of_file(self, nodes: list[Any], coded: list[tuple[str, str]]) -> None:
        """What pyx12 reports after the last segment (missing SE, GE, IEA)."""
        self._queue.append(((_END, 0), ("EOF", None, nodes, coded)))

    def apply_until(self, number: float) -> None:
        """Apply what was read before the INS of segment `number` (not that INS's loop)."""
        while self._queue and self._queue[0][0] < (number, 1):
            self._apply(self._queue.popleft()[1])

    def rewind(self, number: int) -> None:
        """Forget what was queued from the INS of segment `number` on: the envelope pass
        reads it again from there (a new scan from its resume point)."""
        while self._queue and self._queue[-1][0] >= (number, 1):
            self._queue.pop()

    def _apply(self, event: tuple[Any, ...]) -> None:
        s = self.s
        kind = event[0]
        if kind == "INS+":
            current = s["set"]
            if current is not None:
                current["in_loop"], current["loop_bad"] = True, bool(event[1] and event[2])
            return
        if kind == "BAD":
            if s["set"] is not None:
                s["set"]["loop_bad"] = True
            return
        seg_id, values, nodes, coded = event
        if seg_id in ("INS", "EOF") or seg_id in _ENVELOPE:
            self._end_loop()
        if seg_id == "ISA":
            self._interchange(values)
        elif seg_id == "GS":
            self._group(values)
        elif seg_id == "ST":
            self._open_set(values)
        self._errors(nodes, coded)
        if seg_id == "SE":
            self._close_set()
        elif seg_id == "GE":
            self._close_group(values.get("GE01"))

    # -- the checkpoint ----------------------------------------------------------------------
    def stage(self, until: int | None = None) -> dict[str, Any]:
        """Apply what was read before the INS of segment `until` (everything: None), stage
        what is buffered; returns the state a checkpoint keeps (`state=` above)."""
        self.apply_until(_END if until is None else until)
        return {**self.s, "blocks": self._blob.stage() if self._blob is not None else 0}

    # -- the end ---------------------------------------------------------------------------
    def finish(self, *, rejected: bool = False, when: datetime | None = None) -> AckOutcome:
        """Close what is open (a file cut short: R), commit the 999 (997) and, when due, the
        TA1. `rejected`: the file was rejected whole, so every set not yet acknowledged is R.
        Returns what was written."""
        self.apply_until(_END)
        s = self.s
        if rejected:
            self.rejecting = True
        self._end_loop()
        if s["set"] is not None:
            self._close_set()
        if s["group"] is not None:
            self._close_group(None)
        outcome = AckOutcome()
        if s["head"] and self._blob is not None and not s["ta1_codes"]:
            control = f"{s['control']:09d}"
            self._write(_segment("GE", str(s["st999"]), str(s["control"])), count=False)
            self._write(_segment("IEA", "1", control), count=False)
            self._blob.commit("application/edi-x12")
            worst = max(s["results"], key=lambda c: _SEVERITY[c], default=None)
            outcome = AckOutcome(kind=s["kind"], code=worst, blobs=[self._blob.blob.blob_name])
        codes = [c for c in s["ta1_codes"] if c in _TA1_REJECTS] or s["ta1_codes"]
        if s["isa"] is not None and (codes or s["ta1_requested"]):
            code = codes[0] if codes else "000"
            blob = write_ta1(self._blob_for("ta1"), s["isa"], s["control"], code, when)
            outcome.ta1 = code
            outcome.blobs.append(blob)
        return outcome

    # -- internals -------------------------------------------------------------------------
    def _write(self, text: str, *, count: bool = True) -> None:
        assert self._blob is not None  # the ISA came first
        self._blob.add(text.encode("ascii", "replace"))
        if count:
            self.s["segments"] += text.count(TERMINATOR)

    def _interchange(self, values: dict[str, str]) -> None:
        s = self.s
        if s["isa"] is not None or not values:
            return  # a second interchange in one file: answered in the first one's document
        s["isa"] = values
        s["kind"] = "997" if values.get("ISA12", "") < "00501" else "999"
        s["ta1_requested"] = values.get("ISA14") == "1"
        self._blob = StagedBlob(self._blob_for(s["kind"]))

    def _group(self, values: dict[str, str]) -> None:
        s = self.s
        if s["group"] is not None:
            self._close_group(None)
        if s["isa"] is None:
            return
        value = values.get
        when = datetime.now(UTC)
        if not s["head"]:
            isa = s["isa"]
            gs08 = VERSION_999 if s["kind"] == "999" else "004010"
            self._write(_isa(isa, s["control"], when), count=False)
            self._write(_segment("GS", "FA", value("GS03") or "", value("GS02") or "",
                                 when.strftime("%Y%m%d"), when.strftime("%H%M"),
                                 str(s["control"]), "X", gs08), count=False)  # fmt: skip
            s["head"] = True
        s["st999"] += 1
        s["segments"] = 0
        control = f"{s['st999']:04d}"
        if s["kind"] == "999":
            self._write(_segment("ST", "999", control, VERSION_999))
            self._write(_segment("AK1", value("GS01") or "", value("GS06") or "",
                                 value("GS08") or ""))  # fmt: skip
        else:
            self._write(_segment("ST", "997", control))
            self._write(_segment("AK1", value("GS01") or "", value("GS06") or ""))
        s["group"] = {"sets": 0, "accepted": 0, "codes": [], "acks": []}

    def _open_set(self, values: dict[str, str]) -> None:
        s = self.s
        if s["set"] is not None:
            self._close_set()
        if s["group"] is None:
            return
        value = values.get
        s["group"]["sets"] += 1
        s["set"] = {
            "st01": value("ST01") or "",
            "st02": value("ST02") or "",
            "vriic": value("ST03") or "",
            "codes": [],
            "bad_segments": 0,
            "loops_ok": 0,
            "loops_bad": 0,
            "in_loop": False,
            "loop_bad": False,
        }
        node = self._set_node()
        self._write(_render(s["kind"], lambda v: v.visit_st_pre(node)))  # fmt: skip

    def _set_node(self) -> _SetNode:
        current = self.s["set"]
        return _SetNode(current["st01"], current["st02"], current["vriic"],
                        codes=list(current["codes"]),
                        bad_segments=int(current["bad_segments"]))  # fmt: skip

    def _errors(self, nodes: list[Any], coded: list[tuple[str, str]]) -> None:
        s = self.s
        for level, code in coded:
            if level == "isa":
                s["ta1_codes"].append(code)
            elif level == "gs" and s["group"] is not None:
                s["group"]["codes"].append(code)
            elif level == "st" and s["set"] is not None:
                s["set"]["codes"].append(code)
        if s["set"] is None:
            return  # outside a set (pyx12's tree has no place for it either)
        for node in nodes:
            s["set"]["bad_segments"] += 1
            self._write(_render(s["kind"], functools.partial(_visit_segment, node=node)))

    def _end_loop(self) -> None:
        current = self.s["set"]
        if current is None or not current["in_loop"]:
            return
        current["loops_bad" if current["loop_bad"] else "loops_ok"] += 1
        current["in_loop"], current["loop_bad"] = False, False

    def _close_set(self) -> None:
        s = self.s
        self._end_loop()
        current = s["set"]
        node = self._set_node()
        if self.rejecting or current["codes"]:
            node.ack_code = REJECTED
        elif not current["bad_segments"]:
            node.ack_code = ACCEPTED
        else:
            node.ack_code = ACCEPTED_WITH_ERRORS if current["loops_ok"] else REJECTED
        self._write(_render(s["kind"], lambda v: v.visit_st_post(node)))
        group = s["group"]
        group["acks"].append(node.ack_code)
        group["accepted"] += node.ack_code in (ACCEPTED, ACCEPTED_WITH_ERRORS)
        s["set"] = None

    def _close_group(self, included: str | None) -> None:
        s = self.s
        if s["set"] is not None:
            self._close_set()
        group = s["group"]
        if group is None:
            return
        acks = group["acks"]
        if included is None:
            group["codes"].append("3")  # GE missing (pyx12 reports it at the end)
        if self.rejecting or group["codes"] or not acks:
            code = REJECTED
        elif all(a == ACCEPTED for a in acks):
            code = ACCEPTED
        elif all(a == REJECTED for a in acks):
            code = REJECTED
        elif REJECTED in acks:
            code = PARTIAL
        else:
            code = ACCEPTED_WITH_ERRORS
        codes = sorted(dict.fromkeys(group["codes"]))[:5]
        received = str(group["sets"])
        claimed = str(int(included)) if included and _is_int(included) else "0"  # 0: no GE
        self._write(_segment("AK9", code, claimed, received, str(group["accepted"]), *codes))
        self._write(_segment("SE", str(s["segments"] + 1), f"{s['st999']:04d}"))
        s["results"].append(code)
        s["group"] = None


#: The elements of envelope segments the acknowledgment needs.
_KEPT = {"ISA": [f"ISA{i:02d}" for i in range(1, 17)], "GS": ["GS01", "GS02", "GS03", "GS06",
         "GS08"], "ST": ["ST01", "ST02", "ST03"], "GE": ["GE01"]}  # fmt: skip
_END = float("inf")


def _values(seg_id: str, data: Any) -> dict[str, str]:
    names = _KEPT.get(seg_id)
    if not names or data is None:
        return {}
    return {name: (data.get_value(name) or "").strip() for name in names}


def _is_int(text: str | None) -> bool:
    return text is not None and text.strip().isdigit()


def _visit_segment(visitor: Any, *, node: Any) -> None:
    visitor.visit_seg(node)
    for element in node.elements:
        visitor.visit_ele(element)


_ENVELOPE = ("SE", "GE", "IEA", "ST", "GS", "ISA")
