"""The 834 reader's speed-ups inside pyx12 (`shared/imports/x12/speedups.py`: the envelope
pass skips element validation in member loops, a cached reference-designator parse, a
counter keyed by text) change no result: both passes give what they give on pyx12 as
published, on good and broken files. The oracle runs in a process that never installs them
(`pyx12_oracle`), and says so; here they are installed (tests/imports/conftest.py). Only
`install()` applies them: importing the reader changes nothing in pyx12."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import date

import pytest
import pyx12.errors
import pyx12.nodeCounter
import pyx12.path
import pyx12.segment

from harness import import_samples as samples
from shared.imports.importer import run_import
from shared.imports.request import ImportRequest
from shared.imports.x12 import speedups
from tests.imports.pyx12_oracle import ROOT, Oracle, pristine, reader_outcome
from tests.imports.support import ImportsEnv

SPEEDUPS = ["apply_segment_errors", "_parse_refdes", "NodeCounter"]
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


@pytest.mark.parametrize("mutate", BROKEN)
def test_both_passes_find_what_they_find_on_pyx12_as_published(
    mutate: object, pyx12_oracle: Oracle
) -> None:
    good = samples.edi_bytes(list(samples.members(6)))
    data = mutate(good)  # type: ignore[operator]
    assert speedups.installed() == SPEEDUPS
    fast = reader_outcome(data)
    assert fast == pyx12_oracle.read(data)
    assert fast != reader_outcome(good) or mutate is BROKEN[0]


def test_the_oracle_runs_pyx12_as_published_and_this_process_does_not(
    pyx12_oracle: Oracle,
) -> None:
    """The check the oracle's every answer carries tells the two apart."""
    pyx12_oracle.read(samples.edi_bytes(list(samples.members(1))))
    assert pyx12_oracle.last_pristine == dict.fromkeys(SPEEDUPS, True)
    assert pristine() == dict.fromkeys(SPEEDUPS, False)


_IMPORT_THEN_INSTALL = """
import json
from tests.imports.pyx12_oracle import pristine
import shared.imports.acks, shared.imports.importer
import shared.imports.x12._pyx12, shared.imports.x12.errors, shared.imports.x12.families
import shared.imports.x12.members, shared.imports.x12.reader, shared.imports.x12.speedups
import shared.imports.x12.stream
from shared.imports.x12 import speedups
imported = pristine()
first = speedups.install()
installed = pristine()
print(json.dumps([imported, first, installed, speedups.install(), speedups.installed()]))
"""


def test_importing_the_reader_changes_nothing_in_pyx12_and_install_does() -> None:
    done = subprocess.run([sys.executable, "-c", _IMPORT_THEN_INSTALL], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    imported, first, installed, again, now = json.loads(done.stdout)
    assert imported == dict.fromkeys(SPEEDUPS, True)
    assert installed == dict.fromkeys(SPEEDUPS, False)
    assert first == again == now == SPEEDUPS  # idempotent


def test_an_import_run_installs_them_when_it_starts(
    imports_env: ImportsEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(speedups, "install", lambda: calls.append("install") or [])
    imports_env.upload("acme", "a.834", samples.edi_bytes(list(samples.members(1))))
    report = run_import(ImportRequest.nightly("acme", date(2026, 11, 22)), token=1, email=False)
    assert calls == ["install"] and report.imported == 1


def test_the_counter_keyed_by_text_counts_and_resets_as_pyx12s() -> None:
    ours, theirs = speedups.NodeCounter(), pyx12.nodeCounter.NodeCounter()
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
