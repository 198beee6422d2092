"""The 834 reader's speed-ups inside pyx12 (edi_reader: the envelope pass skips element
validation in member loops, a cached reference-designator parse, a counter keyed by text)
change no result: both passes give what pyx12's own code gives, on good and broken files."""

from __future__ import annotations

import pytest
import pyx12.map_walker
import pyx12.nodeCounter
import pyx12.segment
import pyx12.x12context

from harness import import_samples as samples
from shared.imports import edi_reader
from shared.imports.records import SourceFileError
from shared.imports.text_stream import ChunkedText

_MEMBER = b"INS*Y*18*030*XN*A*E**FT~\nREF*0F*M0000001~\n"
BROKEN = [
    lambda b: b,
    lambda b: b.replace(b"BGN*00", b"BGN*99"),  # a header element error
    lambda b: b.replace(b"DMG*D8*1941", b"DMG*D8*1941023", 1),  # a member element error
    lambda b: b.replace(
        b"REF*0F*M0000001~\n", b"REF*0F*M0000001~\nREF*0F*X~\nREF*0F*Y~\nREF*0F*Z~\nREF*0F*W~\n", 1
    ),  # too many repeats in a member loop
    lambda b: b.replace(_MEMBER, _MEMBER.replace(b"INS*Y", b"INS*Q"), 1),  # a bad code
    lambda b: b.replace(b"N1*IN", b"N1*XX", 1),  # a header loop not found
    lambda b: b.replace(b"SE*", b"SE*9"),  # a wrong segment count
    lambda b: b[: len(b) // 2],  # truncated inside a member
]


def _read(data: bytes) -> tuple[list[str], list[tuple[object, ...]]]:
    envelope = edi_reader.check_envelope(ChunkedText([data]))
    try:
        members = [(r.number, r.error, r.member_id, r.change) for r in
                   edi_reader.read_834(ChunkedText([data]))]  # fmt: skip
    except SourceFileError as error:
        members = [("file error", str(error))]
    return envelope, members


@pytest.mark.parametrize("mutate", BROKEN)
def test_both_passes_find_what_pyx12_alone_finds(
    mutate: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = mutate(samples.edi_bytes(list(samples.members(6))))  # type: ignore[operator]
    fast = _read(data)
    monkeypatch.setattr(pyx12.x12context, "apply_segment_errors",
                        edi_reader._validate_every_segment)  # fmt: skip
    monkeypatch.setattr(pyx12.map_walker, "NodeCounter", pyx12.nodeCounter.NodeCounter)
    monkeypatch.setattr(pyx12.segment.Segment, "_parse_refdes", _original_parse_refdes)
    assert fast == _read(data)
    assert fast != _read(samples.edi_bytes(list(samples.members(6)))) or mutate is BROKEN[0]


def _original_parse_refdes(self: pyx12.segment.Segment, ref_des: str) -> tuple[object, ...]:
    xp = pyx12.path.X12Path(ref_des)
    if xp.seg_id is not None and xp.seg_id != self.seg_id:
        raise pyx12.errors.EngineError(f"Invalid Reference Designator: {ref_des}")
    ele = xp.ele_idx - 1 if xp.ele_idx is not None else None
    return ele, xp.subele_idx - 1 if xp.subele_idx is not None else None


def test_the_counter_keyed_by_text_counts_and_resets_as_pyx12s() -> None:
    ours, theirs = edi_reader._NodeCounter(), pyx12.nodeCounter.NodeCounter()
    paths = [
        "/ISA_LOOP",
        "/ISA_LOOP/GS_LOOP",
        "/ISA_LOOP/GS_LOOP/ST_LOOP/DETAIL/2000",
        "/ISA_LOOP/GS_LOOP/ST_LOOP/DETAIL/2000/INS",
        "/ISA_LOOP/GS_LOOP/ST_LOOP/DETAIL/2000/2300",
        "/ISA_LOOP/GS_LOOP/ST_LOOP/DETAIL/2000/2300/HD",
        "/ISA_LOOP/GS_LOOP/ST_LOOP/DETAIL/20001",
    ]
    for counter in (ours, theirs):
        for i, path in enumerate(paths * 3):
            counter.increment(pyx12.path.X12Path(path) if i % 2 else path)
        counter.reset_to_node("/ISA_LOOP/GS_LOOP/ST_LOOP/DETAIL/2000")
        counter.setCount("/ISA_LOOP/GS_LOOP", 7)
    assert dict(ours.getState()) == dict(theirs.getState())
    assert [ours.get_count(p) for p in paths] == [theirs.get_count(p) for p in paths]
    assert ours.get_count(paths[3]) == 0 and ours.get_count(paths[6]) == 3
    with pytest.raises(pyx12.errors.EngineError):
        pyx12.segment.Segment("DMG*D8*19410101", "~", "*", ":").get("NM103")
