"""The pyx12 internals the 834 reader uses (`shared/imports/x12/_pyx12.py`) are there in the
installed pyx12, and each fallback keeps the reader's results.

Each has a fallback, so an upgrade that removes one changes cost, not results: these fail so
the upgrade is noticed instead of quietly costing more (a pass that cannot resume mid-file,
pyx12 without the speed-ups)."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
import pyx12.map_if._segment
import pyx12.x12file

from harness import import_samples as samples
from shared.imports.text_stream import ChunkedText
from shared.imports.x12 import _pyx12, speedups
from shared.imports.x12.reader import scan_envelope


def test_the_reader_counters_and_raw_buffer_are_there() -> None:
    data = samples.edi_bytes(list(samples.members(2))).decode("ascii")
    src = pyx12.x12file.X12Reader(io.StringIO(data + "JUNK"))
    seen = [seg.get_seg_id() for seg in src]
    assert seen[0] == "ISA" and seen[-1] == "IEA"
    found = _pyx12.counters(src)
    assert found is not None and set(found) == set(_pyx12.COUNTERS)
    assert found["gs_count"] == 1 and found["isa_ids"] == ["000000001"]
    assert "buffer" in vars(src.raw) and _pyx12.leftover(src).strip() == "JUNK"
    _pyx12.restore_counters(src, {**found, "st_count": 7})
    assert src.st_count == 7


def test_the_patch_points_and_the_defined_validation_are_there() -> None:
    assert all(point.present for point, _ in speedups.REPLACEMENTS)
    assert _pyx12.validate_segment_elements is pyx12.map_if._segment.apply_segment_errors


def test_without_the_counters_a_pass_reads_on_with_no_resume_point(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = samples.edi_bytes(list(samples.members(3)))
    assert scan_envelope(ChunkedText([data]), stop=lambda: True)[1] is not None
    monkeypatch.setattr(_pyx12, "counters", lambda src: None)
    assert scan_envelope(ChunkedText([data]), stop=lambda: True) == ([], None)


def test_a_patch_point_an_upgrade_removed_is_left_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gone = SimpleNamespace()
    point = _pyx12.PatchPoint(gone, "moved_away")
    monkeypatch.setattr(speedups, "REPLACEMENTS", (*speedups.REPLACEMENTS, (point, len)))
    assert "moved_away" not in speedups.install()
    assert not point.present and vars(gone) == {}


def test_an_object_without_the_internals_gets_the_fallbacks() -> None:
    assert _pyx12.counters(object()) is None
    assert _pyx12.leftover(object()) == ""
