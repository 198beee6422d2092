"""Every pyx12 internal the 834 reader reads or replaces, each with its fallback.

pyx12 (4.0) has no public way to resume a stream in the middle of a transaction set, nor to
swap the three functions `speedups` makes faster. What is used of its insides is here and
nowhere else; tests/imports/test_pyx12_internals.py fails when an upgrade removes one, and
each has a fallback, so such an upgrade changes cost, not results:

    X12Reader counters       `cur_line`, `seg_count`, `gs_count`, `st_count`, `isa_ids`,
                             `gs_ids`, `st_ids` (read for a resume point, set when a resumed
                             stream's header has been replayed). Fallback: no resume point
                             (`counters` None): a checkpoint before that INS is not written,
                             and an interrupted pass resumes from an earlier one or the top.
    RawX12File `buffer`      what follows the last segment (characters after the IEA).
                             Fallback: the check is skipped ("" left over).
    patch points             `x12context.apply_segment_errors`, `Segment._parse_refdes`,
                             `map_walker.NodeCounter` (`speedups.install`). Fallback: the
                             point is left as published (`PatchPoint.present` False).
    apply_segment_errors     the element validation as defined (`map_if._segment`), for
                             envelope segments, which pyx12's streaming reader does not
                             validate. Fallback: the one `x12context` imported.

Imports pyx12 only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyx12.map_walker
import pyx12.nodeCounter
import pyx12.segment
import pyx12.x12context

try:
    from pyx12.map_if._segment import apply_segment_errors as _defined_validation
except ImportError:  # moved: the name x12context imported is the same function
    _defined_validation = pyx12.x12context.apply_segment_errors

#: pyx12's element validation of one segment against its map node, as published (never
#: the speed-up that may replace `x12context`'s name for it).
validate_segment_elements: Callable[[Any, Any, Any], bool] = _defined_validation

#: The X12Reader counters a resume point keeps (names and meaning as in pyx12's x12file).
COUNTERS = ("cur_line", "seg_count", "gs_count", "st_count", "isa_ids", "gs_ids", "st_ids")
_LISTS = ("isa_ids", "gs_ids", "st_ids")


def counters(src: Any) -> dict[str, Any] | None:
    """The counters of pyx12's `X12Reader` `src` as they were just before the segment it has
    just read (an INS: its line and segment count one less); None when an upgrade renamed
    them (then no resume point is made there)."""
    if not all(hasattr(src, name) for name in COUNTERS):
        return None
    return {
        "cur_line": int(src.cur_line) - 1,
        "seg_count": int(src.seg_count) - 1,
        "gs_count": int(src.gs_count),
        "st_count": int(src.st_count),
        "isa_ids": list(src.isa_ids),
        "gs_ids": list(src.gs_ids),
        "st_ids": list(src.st_ids),
    }


def restore_counters(src: Any, saved: dict[str, Any]) -> None:
    """Set `src`'s counters to `saved` (what `counters` returned at the resume point): the
    SE, GE and IEA counts are then checked as if it had read from the top. A resume point
    exists only where `counters` found them, so they are there (same pyx12: same deploy)."""
    for name in COUNTERS:
        value = saved[name]
        setattr(src, name, list(value) if name in _LISTS else int(value))


def leftover(src: Any) -> str:
    """What pyx12's raw reader holds after the last segment it split off ("" when unknown)."""
    return str(getattr(getattr(src, "raw", None), "buffer", "") or "")


@dataclass(frozen=True)
class PatchPoint:
    """A name inside pyx12 that `speedups` may rebind: `owner.name`."""

    owner: Any
    name: str

    @property
    def present(self) -> bool:
        return self.name in vars(self.owner)

    def current(self) -> Any:
        return vars(self.owner).get(self.name)

    def rebind(self, value: Any) -> None:
        setattr(self.owner, self.name, value)


#: Where pyx12's streaming reader looks up its per-segment element validation.
SEGMENT_VALIDATION = PatchPoint(pyx12.x12context, "apply_segment_errors")
#: The reference designator parse ("DTP03" -> indexes) behind every `Segment.get_value`.
REFDES_PARSE = PatchPoint(pyx12.segment.Segment, "_parse_refdes")
#: The loop and segment counter class the map walker builds.
NODE_COUNTER = PatchPoint(pyx12.map_walker, "NodeCounter")

#: The counter class as published, which the speed-up's counter keeps the interface of.
NodeCounter = pyx12.nodeCounter.NodeCounter
