"""The error list the 834 reader hands pyx12, and the reader's masked error messages.

`SegmentErrors` is pyx12's error list (its `errh_list`, drained segment by segment by the
reader, `stream`), which also keeps pyx12's own error nodes (`err_seg`, `err_ele`) of the
segments in error, in the order pyx12's tree would hold them, for the acknowledgment
(`acks.AckWriter` renders them with pyx12's visitors); never a bad value, and nothing
logged. An error in an envelope segment's element (ISA, GS, ST, SE, GE, IEA) becomes a
coded envelope error (`coded`), as pyx12's visitors turn them into TA1, AK9 and IK5 codes.

pyx12 messages can quote element values (a birth date), so `drain` masks quoted values.

Imports pyx12's public error handler only: both the reader and `acks` build on it.
"""

from __future__ import annotations

import re
from typing import Any

import pyx12.error_handler

#: The member loop's id in the 834 maps (005010X220A1 and 004010X095A1): every segment from
#: an INS to the next INS or SE is in it or in one of its child loops.
MEMBER_LOOP = "2000"


def in_member_loop(map_node: Any) -> bool:
    """Whether pyx12's map node `map_node` is inside a member loop (2000)."""
    return map_node is not None and MEMBER_LOOP in map_node.x12path.loop_list


#: Element position -> X12 code, for errors in envelope segments' elements, as pyx12's
#: visitors map them: ISA/IEA -> TA105, GS/GE -> AK905, ST/SE -> IK502.
_ISA_ELEMENT = {1: "010", 2: "011", 3: "012", 4: "013", 5: "005", 6: "006", 7: "007",
                8: "008", 9: "014", 10: "015", 11: "016", 12: "017", 13: "018", 14: "019",
                15: "020", 16: "027"}  # fmt: skip
_IEA_ELEMENT = {1: "021", 2: "018"}
_GS_ELEMENT = {6: "6", 8: "2"}
_GE_ELEMENT = {2: "6"}
_ST_ELEMENT = {1: "6", 2: "7"}


def envelope_code(segment: str, position: int) -> tuple[str, str] | None:
    """(level, code) for an error in element `position` of envelope segment `segment`."""
    if segment == "ISA":
        return "isa", _ISA_ELEMENT.get(position, "022")
    if segment == "IEA":
        return "isa", _IEA_ELEMENT.get(position, "022")
    if segment == "GS":
        return "gs", _GS_ELEMENT.get(position, "1")
    if segment == "GE":
        return "gs", _GE_ELEMENT.get(position, "1")
    if segment in ("ST", "SE"):
        return "st", _ST_ELEMENT.get(position, "5")
    return None


class SegmentErrors(pyx12.error_handler.errh_list):  # type: ignore[misc]
    """pyx12's error list of one pass (see the module doc).

    `skip_member_elements`: pyx12's element validation need not run on segments inside
    member loops; loop structure (the map walk: which loop a segment opens, segment and loop
    counts, usage) is still checked on every segment. Set for the whole envelope pass, which
    discards errors of segments inside member loops (the members pass validates and rejects
    each loop on its own), and by the members pass while it reads a family over
    IMPORT_MAX_FAMILY_DEPENDENTS, whose every loop is rejected anyway: refusing such a
    family costs a walk, not a validation (its acknowledgment then reports the loops'
    structure errors only). Honoured once `speedups.install()` has run; before, every
    segment is validated (same records, slower)."""

    def __init__(self, *, skip_member_elements: bool = False) -> None:
        super().__init__()
        self.skip_member_elements = skip_member_elements
        self._current: Any = None  # the err_seg of the segment being read, once in error
        self._pending: tuple[Any, ...] | None = None  # add_seg's arguments until then
        self._element: Any = None  # the map node of the element being reported
        self._elements: dict[int, Any] = {}
        self._envelope: str | None = None  # the envelope segment being read, if one
        self.finished: list[Any] = []  # err_seg nodes with errors, done
        self.coded: list[tuple[str, str]] = []  # (level, code) of envelope element errors

    def _finish(self) -> None:
        if self._current is not None and self._current.err_count() > 0:
            self.finished.append(self._current)
        self._current, self._pending, self._element = None, None, None
        if self._elements:
            self._elements = {}

    def _node(self) -> Any:
        """The current segment's err_seg, made at its first error (most segments have none)."""
        if self._current is None and self._pending is not None:
            self._current = pyx12.error_handler.err_seg(None, *self._pending)
            self._pending = None
        return self._current

    def take(self) -> tuple[list[Any], list[tuple[str, str]]]:
        """The segments in error finished since the last call, and coded envelope errors."""
        nodes, coded = self.finished, self.coded
        self.finished, self.coded = [], []
        return nodes, coded

    def flush(self) -> None:
        """The end of the file: the last segment's node is done too."""
        self._finish()

    def add_isa_loop(self, seg: Any, src: Any) -> None:
        self._finish()
        self._envelope = "ISA"

    def add_gs_loop(self, seg: Any, src: Any) -> None:
        self._finish()
        self._envelope = "GS"

    def add_st_loop(self, seg: Any, src: Any) -> None:
        self._finish()
        self._envelope = "ST"

    def close_isa_loop(self, node: Any, seg: Any, src: Any) -> None:
        self._finish()
        self._envelope = "IEA"

    def close_gs_loop(self, node: Any, seg: Any, src: Any) -> None:
        self._finish()
        self._envelope = "GE"

    def close_st_loop(self, node: Any, seg: Any, src: Any) -> None:
        self._finish()
        self._envelope = "SE"

    def add_seg(self, map_node: Any, seg: Any, seg_count: int, cur_line: int,
                ls_id: str | None) -> None:  # fmt: skip
        self._finish()
        self._envelope = None
        self._pending = (map_node, seg, seg_count, cur_line, ls_id)

    def add_ele(self, map_node: Any) -> None:
        self._element = map_node

    def seg_error(self, err_cde: str, err_str: str, err_value: str | None = None,
                  src_line: int | None = None) -> None:  # fmt: skip
        super().seg_error(err_cde, err_str, err_value, src_line)
        node = self._node()
        if node is not None:
            node.add_error(err_cde, err_str, None)

    def ele_error(self, err_cde: str, err_str: str, bad_value: str | None,
                  refdes: str | None = None) -> None:  # fmt: skip
        super().ele_error(err_cde, err_str, bad_value, refdes)
        if self._element is None:
            return
        if self._node() is None:
            if self._envelope is not None:
                node = pyx12.error_handler.err_ele(None, self._element)
                found = envelope_code(self._envelope, node.ele_pos)
                if found is not None:
                    self.coded.append(found)
            return
        node = self._elements.get(id(self._element))
        if node is None:
            node = pyx12.error_handler.err_ele(self._current, self._element)
            self._elements[id(self._element)] = node
            self._current.elements.append(node)
        node.add_error(err_cde, err_str, None)  # never the bad value (IK404)


#: A segment quoted in pyx12's message ("Segment N3*17 MAIN ST not found": its first element,
#: or all of an HL): only its id is kept, since the element may be a member's address or name.
_QUOTED_SEGMENT = re.compile(r"\b([A-Z][A-Z0-9]{1,2})\*[^\s]*(?:\s[^\s.]+)*?(?= not found)")


def _mask(message: str, value: object) -> str:
    if isinstance(value, str) and value.strip():
        message = message.replace(value, "…")
    return _QUOTED_SEGMENT.sub(r"\1", message)


def drain(errh: SegmentErrors) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """(envelope-level errors, segment/element errors with quoted values masked, envelope
    errors as (level, X12 code)) collected since the last drain."""
    envelope = [f"{code}: {text}" for code, text in errh.err_isa + errh.err_gs + errh.err_st]
    levels = (("isa", errh.err_isa), ("gs", errh.err_gs), ("st", errh.err_st))
    coded = [(level, code) for level, found in levels for code, _ in found]
    segment = [_mask(f"{code}: {text}", value) for code, text, value in errh.err_seg]
    segment += [
        _mask(f"{refdes or 'element'}: {text}", value) for code, text, value, refdes in errh.err_ele
    ]
    errh.reset()
    return envelope, segment, coded
