"""X12 acknowledgments of every 834 read (`shared/imports/acks.py`): a 999 (997) whose AK9
agrees with pyx12's own validation of the same file (pyx12 as published, in a process that
never installs the reader's speed-ups: `pyx12_oracle`), a TA1 or a rejection acknowledgment
for a file rejected whole, and one acknowledgment whatever the invocations it took."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import pytest

from harness import import_samples as samples
from shared.imports.importer import run_import
from shared.imports.layout import Layout
from shared.imports.request import ImportRequest
from tests.imports.edi834 import REAL, real
from tests.imports.pyx12_oracle import Oracle
from tests.imports.support import ImportsEnv
from tests.support import AppSettings

RUN = ImportRequest.nightly("acme", date(2026, 11, 22))
LAYOUT = Layout("acme", RUN.run_id)
REAL_834 = sorted(p.name for p in REAL.iterdir() if p.suffix in (".txt", ".834")
                  and not p.name.startswith("LICENSE"))  # fmt: skip


def segments(text: str) -> list[list[str]]:
    return [s.strip().split("*") for s in text.split("~") if s.strip()]


def body(text: str) -> dict[str, Any]:
    """What a 999/997 says, without its envelope: AK9 and, per set, IK5 and the IK3/IK4."""
    sets: list[dict[str, Any]] = []
    ak9: list[str] = []
    for seg in segments(text):
        tag = seg[0]
        if tag == "AK2":
            sets.append({"set": seg[1:3], "notes": [], "result": None})
        elif tag in ("IK3", "AK3"):
            sets[-1]["notes"].append(tuple(seg[:5]))
        elif tag in ("IK4", "AK4"):
            sets[-1]["notes"].append(tuple(seg[:4]))  # never IK404, the bad value
        elif tag in ("IK5", "AK5"):
            sets[-1]["result"] = seg[1:]
        elif tag == "AK9":
            ak9 = seg[1:]
    for found in sets:
        found["notes"] = sorted(found["notes"])
    return {"ak9": ak9, "sets": sets}


def agrees(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    """pyx12 knows A and R only: where it says A so do we; where it says R we say E (the
    loops in error rejected, the others imported), P or R. Counts and notes are the same."""
    assert (ours["ak9"][0] == "A") == (theirs["ak9"][0] == "A"), (ours, theirs)
    assert ours["ak9"][1:3] == theirs["ak9"][1:3]  # sets included, received
    assert ours["ak9"][4:] == theirs["ak9"][4:]  # group error codes
    assert len(ours["sets"]) == len(theirs["sets"])
    for mine, pyx12s in zip(ours["sets"], theirs["sets"], strict=True):
        assert mine["set"] == pyx12s["set"] and mine["notes"] == pyx12s["notes"]
        assert (mine["result"][0] == "A") == (pyx12s["result"][0] == "A"), (mine, pyx12s)
        assert mine["result"][1:] == pyx12s["result"][1:]


def test_every_real_834_is_acknowledged_and_its_ak9_agrees_with_pyx12(
    imports_env: ImportsEnv,
    pyx12_oracle: Oracle,
) -> None:
    for name in REAL_834:
        imports_env.upload("acme", f"{Path(name).stem}.834", real(name))
    report = run_import(RUN, token=1, email=False).to_dict()
    files = {f["name"]: f for f in report["files"]}
    assert len(files) == len(REAL_834) and all(f["status"] == "processed" for f in files.values())
    codes = {}
    for name in REAL_834:
        found = files[f"{Path(name).stem}.834"]
        kind = "997" if "4010" in name else "999"
        assert found["acks"] == [LAYOUT.ack(found["name"], kind)], found
        ours = imports_env.read(found["acks"][0]).decode("ascii")
        data = real(name)
        if b"~ \n" in data:  # whitespace between segments is no error here; for pyx12 it is
            data = data.replace(b"~ \n", b"~\n")
        agrees(body(ours), body(pyx12_oracle.ack(data)))
        codes[name] = found["ack"]
    assert codes["pyx12_834_ls_le_ls.txt"] == "999 A"
    assert codes["pyx12_834_lui_id_4010.txt"] == "997 A"
    assert codes["hccinfhir_sample_834_06.txt"] == "999 R"  # both members' DMG02 invalid
    assert codes["pyx12_example834_5010.txt"] == "999 R"  # its one member's INS06
    totals = report["totals"]
    assert totals["acks_written"] == len(REAL_834)
    assert totals["acks_accepted"] + totals["acks_rejected"] == len(REAL_834)
    assert totals["acks_rejected"] == 2


def test_a_file_with_some_members_in_error_is_accepted_with_errors(
    imports_env: ImportsEnv,
    pyx12_oracle: Oracle,
) -> None:
    rows = list(samples.members(3))
    data = samples.edi_bytes(rows).replace(b"DMG*D8*19410202", b"DMG*D8*19411302")
    imports_env.upload("acme", "a.834", data)
    (found,) = run_import(RUN, token=1, email=False).to_dict()["files"]
    assert (found["ack"], found["imported"], found["rejected"]) == ("999 E", 2, 1)
    ours = body(imports_env.read(LAYOUT.ack("a.834", "999")).decode())
    assert ours["ak9"] == ["E", "1", "1", "1"]
    assert ours["sets"][0]["result"] == ["E", "5"]
    assert ours["sets"][0]["notes"] == [("IK3", "DMG", "15", "", "8"), ("IK4", "2", "1251", "8")]
    agrees(ours, body(pyx12_oracle.ack(data)))
    assert b"19411302" not in imports_env.read(LAYOUT.ack("a.834", "999"))  # no IK404


def _reject(imports_env: ImportsEnv, data: bytes) -> dict[str, Any]:
    imports_env.upload("acme", "bad.834", data)
    report = run_import(RUN, token=1, email=False).to_dict()
    (found,) = report["files"]
    assert found["status"] == "rejected", found
    assert imports_env.blob_names("acme/rejected/") == [
        "acme/rejected/2026-11-22/bad.834", "acme/rejected/2026-11-22/bad.834.error.json",
    ]  # fmt: skip
    return dict(found)


def _ta1(imports_env: ImportsEnv) -> list[str]:
    (ta1,) = [s for s in segments(imports_env.read(LAYOUT.ack("bad.834", "ta1")).decode())
              if s[0] == "TA1"]  # fmt: skip
    return ta1


@pytest.mark.parametrize(
    ("mutate", "code"),
    [
        (lambda b: b[: b.rindex(b"IEA")], "023"),  # the interchange trailer missing
        (lambda b: b.replace(b"IEA*1*000000003", b"IEA*1*000000004"), "001"),
        (lambda b: b.replace(b"IEA*1*", b"IEA*2*"), "021"),  # group count
        (lambda b: b.replace(b"*260401*1500*^", b"*260431*1500*^"), "014"),  # ISA09: 31 April
    ],
)  # fmt: skip
def test_a_broken_interchange_envelope_gets_a_ta1_rejection(
    imports_env: ImportsEnv, mutate: Any, code: str
) -> None:
    """Only the TA1 answers a rejected interchange (its groups are not acknowledged)."""
    data = mutate(real("pyx12_834_deident_term.txt"))
    found = _reject(imports_env, data)
    assert found["ack"] == f"TA1 R {code}"
    assert found["acks"] == [LAYOUT.ack("bad.834", "ta1")]
    isa09 = data.decode()[70:76]
    assert _ta1(imports_env) == ["TA1", "000000003", isa09, "1500", "R", code]


def test_a_broken_transaction_set_gets_a_999_rejection(
    imports_env: ImportsEnv, pyx12_oracle: Oracle
) -> None:
    data = real("pyx12_834_deident_term.txt").replace(b"SE*27*", b"SE*28*")
    found = _reject(imports_env, data)
    assert found["ack"] == "999 R" and "SE count" in found["error"]
    ours = body(imports_env.read(LAYOUT.ack("bad.834", "999")).decode())
    assert ours["ak9"] == ["R", "1", "1", "0"] and ours["sets"][0]["result"] == ["R", "4"]
    agrees(ours, body(pyx12_oracle.ack(data)))


def test_a_requested_ta1_is_written_beside_the_999(imports_env: ImportsEnv) -> None:
    data = real("pyx12_834_deident_term.txt").replace(b"*000000003*0*T*:", b"*000000003*1*T*:")
    assert data != real("pyx12_834_deident_term.txt")  # ISA14=1: a TA1 asked for
    imports_env.upload("acme", "asks.834", data)
    (found,) = run_import(RUN, token=1, email=False).to_dict()["files"]
    assert found["ack"] == "999 A, TA1 A 000" and len(found["acks"]) == 2


def test_a_file_over_the_size_cap_is_rejected_unread_and_acknowledged(
    imports_env: ImportsEnv, app_settings: AppSettings
) -> None:
    app_settings.set({"IMPORT_MAX_FILE_BYTES": "1024"})
    data = samples.edi_bytes(list(samples.members(20)))
    assert len(data) > 1024
    found = _reject(imports_env, data)
    assert found["error"].startswith("file: ") and "IMPORT_MAX_FILE_BYTES=1024" in found["error"]
    assert found["records"] == 0 and found["ack"] == "TA1 R 024"
    assert _ta1(imports_env)[1:] == ["000000001", "260101", "0200", "R", "024"]


def test_a_file_that_is_no_interchange_gets_no_acknowledgment(imports_env: ImportsEnv) -> None:
    found = _reject(imports_env, b"hello, this is not X12")
    assert (found["ack"], found["acks"]) == ("none", [])
    assert imports_env.blob_names("acme/acks/") == []


def test_an_acknowledgment_built_over_many_invocations_is_the_one_built_in_one(
    imports_env: ImportsEnv,
) -> None:
    """The document is staged as the file streams and its state kept in the checkpoint:
    resumed at every family, it holds the same segments as when read in one go."""
    rows = list(samples.members(30, bad_every=4))  # a bad birth date every 4th member
    data = samples.edi_bytes(rows)
    for account in ("acme", "twin"):
        imports_env.upload(account, "e.834", data)
    run_import(ImportRequest.nightly("twin", date(2026, 11, 22)), token=1, email=False)
    statuses, token = [], 10
    while not statuses or statuses[-1] != "completed":
        statuses.append(run_import(RUN, token, email=False, budget_s=0, chunk_size=2).status)
        token += 1
    assert len(statuses) > 10
    ours = imports_env.read(LAYOUT.ack("e.834", "999")).decode()
    theirs = imports_env.read(Layout("twin", RUN.run_id).ack("e.834", "999")).decode()
    inner = [s for s in segments(ours) if s[0] not in ("ISA", "GS", "GE", "IEA")]
    assert inner == [s for s in segments(theirs) if s[0] not in ("ISA", "GS", "GE", "IEA")]
    assert body(ours)["ak9"] == ["E", "1", "1", "1"]
    assert [n[0] for n in body(ours)["sets"][0]["notes"]].count("IK3") == 7


def test_whitespace_between_segments_is_read_as_translators_write_it(
    imports_env: ImportsEnv,
) -> None:
    """pyx12's example file ends its first segments with "~ " and a line break: rejected
    whole before ("segment contains a leading space"); now read, its member judged on its
    own (its INS06 is invalid, as pyx12 says). A real file laid out so imports whole."""
    imports_env.upload("acme", "example.834", real("pyx12_example834_5010.txt"))
    spaced = real("pyx12_834_deident_family.txt").replace(b"~\n", b"~ \r\n\t")
    imports_env.upload("acme", "spaced.834", spaced)
    report = run_import(RUN, token=1, email=False).to_dict()
    files = {f["name"]: f for f in report["files"]}
    assert files["example.834"]["status"] == "processed"
    assert files["example.834"]["rejected"] == 1
    assert "INS06" in files["example.834"]["rejections"][0]["reason"]
    assert (files["spaced.834"]["status"], files["spaced.834"]["imported"]) == ("processed", 3)
    assert files["spaced.834"]["ack"] == "999 A"
    rejection = files["spaced.834"]["rejections"]
    assert rejection == [] and len(imports_env.members("acme")) == 3


def test_an_interchange_header_pyx12_cannot_read_still_gets_a_ta1(
    imports_env: ImportsEnv,
) -> None:
    """ISA12 neither 00401 nor 00501: pyx12 refuses the header; the ISA read loosely is
    enough to answer it (TA105 017, invalid interchange version)."""
    data = real("pyx12_834_deident_term.txt").replace(b"*^*00501*", b"*^*00601*")
    found = _reject(imports_env, data)
    assert "Version Number is unknown" in found["error"] and found["ack"] == "TA1 R 017"
    assert _ta1(imports_env) == ["TA1", "000000003", "260401", "1500", "R", "017"]
