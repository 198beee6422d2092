"""Faster equivalents of three pyx12 internals, installed by an explicit `install()`.

pyx12 is most of an 834's import time. `install()` (the importer calls it when a run
starts; idempotent) rebinds, process-wide, three names inside pyx12 (`_pyx12`'s patch
points) to versions that give the same results faster:

    SEGMENT_VALIDATION   `validate_segment`: pyx12's per-segment element validation,
                         skipped for a segment in a member loop when the pass's error list
                         says so (`SegmentErrors.skip_member_elements`: the envelope pass,
                         which discards those errors; a family over its cap)
    REFDES_PARSE         `parse_refdes`: the reference designator parse ("DTP03") cached
    NODE_COUNTER         `NodeCounter`: the walker's loop counter keyed by the path's text

Importing this module (or any reader module) changes nothing in pyx12: only `install()`
does. The tests compare the reader on installed speed-ups with the reader and pyx12 as
published, in a process that never calls it (tests/imports/test_834_fast_paths.py).

Imports `_pyx12` (where the patch points are) and `errors` (the member loop's id).
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from typing import Any

import pyx12.errors
import pyx12.path

from shared.imports.x12 import _pyx12
from shared.imports.x12.errors import MEMBER_LOOP


def validate_segment(node: Any, seg_data: Any, errh: Any) -> bool:
    """pyx12's per-segment element validation (`apply_segment_errors`), skipped only for a
    segment in a member loop read with `skip_member_elements` set (errors discarded)."""
    if getattr(errh, "skip_member_elements", False) and MEMBER_LOOP in node.x12path.loop_list:
        return True
    return bool(_pyx12.validate_segment_elements(node, seg_data, errh))


@functools.lru_cache(maxsize=1024)
def _refdes(ref_des: str) -> tuple[str | None, int | None, int | None]:
    path = pyx12.path.X12Path(ref_des)
    ele = path.ele_idx - 1 if path.ele_idx is not None else None
    sub = path.subele_idx - 1 if path.subele_idx is not None else None
    return path.seg_id, ele, sub


def parse_refdes(self: Any, ref_des: str) -> tuple[int | None, int | None]:
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


class NodeCounter(_pyx12.NodeCounter):  # type: ignore[misc]
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
        return OrderedDict((pyx12.path.X12Path(k), v) for k, v in self._counts.items())


def _is_below(root: list[str], size: int, key: str) -> bool:
    child = key.split("/")
    return len(child) > size and child[:size] == root


#: Each patch point and what `install()` puts there.
REPLACEMENTS: tuple[tuple[_pyx12.PatchPoint, Any], ...] = (
    (_pyx12.SEGMENT_VALIDATION, validate_segment),
    (_pyx12.REFDES_PARSE, parse_refdes),
    (_pyx12.NODE_COUNTER, NodeCounter),
)
_lock = threading.Lock()


def install() -> list[str]:
    """Put the speed-ups in place, process-wide (idempotent, thread-safe); returns the names
    of the patch points now replaced. A point an upgrade removed is left as published
    (that pass is slower, its results the same; test_pyx12_internals.py fails first)."""
    with _lock:
        for point, replacement in REPLACEMENTS:
            if point.present and point.current() is not replacement:
                point.rebind(replacement)
        return installed()


def installed() -> list[str]:
    """The patch points whose speed-up is in place."""
    return [point.name for point, replacement in REPLACEMENTS
            if point.current() is replacement]  # fmt: skip
