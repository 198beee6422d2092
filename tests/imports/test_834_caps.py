"""Inputs bounded where they enter: file names, file size (test_acks.py), families, member
loops and segments (IMPORT_MAX_*), each refused with a clear reason, never dropped silently
and never retried until poison; the settings checked at start-up."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
import requests
from azure.storage.blob import ContainerSasPermissions, generate_container_sas

from harness.services import AZURITE_ACCOUNT, AZURITE_KEY
from shared.imports.config import ImportSettings, InvalidSetting, check
from shared.imports.importer import run_import
from shared.imports.layout import InvalidFileName, check_file_name, imports_container
from shared.imports.records import SourceFileError
from shared.imports.request import ImportRequest
from shared.imports.text_stream import ChunkedText
from shared.imports.x12.families import FAMILY_SIZE, ReadLimits
from shared.imports.x12.members import LOOP_SIZE
from shared.imports.x12.reader import check_envelope, read_834
from tests.imports import edi834
from tests.imports.support import ImportsEnv
from tests.support import AppSettings, child_env

RUN = ImportRequest.nightly("acme", date(2026, 11, 22))


def family(dependents: int, subscriber: str = "S1") -> list[str]:
    members = edi834.subscriber(subscriber)
    for i in range(dependents):
        members += ["INS*N*19*021*28*A", f"REF*0F*{subscriber}", f"NM1*IL*1*DOE*C{i}",
                    "DMG*D8*20100101*F"]  # fmt: skip
    return members


def chunks(data: bytes) -> ChunkedText:
    return ChunkedText(data[i : i + 65536] for i in range(0, len(data), 65536))


def test_a_family_over_its_cap_is_rejected_member_by_member_with_resume_points() -> None:
    data = edi834.interchange(family(5) + family(2, "S2"))
    records = list(read_834(chunks(data), limits=ReadLimits(max_family_dependents=3)))
    assert [r.category for r in records[:6]] == [FAMILY_SIZE] * 6  # S1 and its 5 children
    assert all("more than 3 dependents in one family" in (r.error or "") for r in records[:6])
    # held until the 4th child passed the cap: then each record carries a resume point
    assert [r.resume is not None for r in records[:6]] == [False] * 4 + [True] * 2
    assert [r.error for r in records[6:]] == [None] * 3  # the next family imports
    # resumed inside the family, at any of its points: the rest is the same
    for i, record in enumerate(records[:6]):
        if record.resume is not None:
            point = record.resume
            rest = ChunkedText([data[int(point["offset"]) :]], start=int(point["offset"]))
            again = list(read_834(rest, resume=point, limits=ReadLimits(max_family_dependents=3)))
            assert [(r.number, r.error) for r in again] == [
                (r.number, r.error) for r in records[i + 1 :]
            ]


ROOT = Path(__file__).resolve().parents[2]

#: The measurement, in a process of its own: tracemalloc counts every thread's allocations,
#: and a test process also runs what earlier tests left behind (a watcher's listing, a
#: devhost listener), which made the peak of the larger file twice the smaller's at times.
FAMILY_MEMORY = """
import json, sys, tracemalloc
from shared.imports.text_stream import ChunkedText
from shared.imports.x12.families import ReadLimits
from shared.imports.x12.reader import read_834
from tests.imports import edi834
from tests.imports.test_834_caps import chunks, family
peaks = []
for dependents in (300, 3_000):  # both over the 200 cap, the second ten times the first
    data = edi834.interchange(family(dependents))
    tracemalloc.start()
    count = sum(1 for _ in read_834(chunks(data), limits=ReadLimits()))
    peaks.append(tracemalloc.get_traced_memory()[1])
    tracemalloc.stop()
    assert count == dependents + 1, count
print(json.dumps(peaks))
"""


def test_memory_stays_flat_in_the_size_of_a_family_over_its_cap() -> None:
    measured = subprocess.run(
        [sys.executable, "-c", FAMILY_MEMORY], cwd=ROOT, capture_output=True, text=True,
        timeout=300, check=True,
    )  # fmt: skip
    peaks = json.loads(measured.stdout.strip().splitlines()[-1])
    assert peaks[1] < 1.25 * peaks[0], peaks  # not 10x: no family held whole


def test_a_member_loop_over_its_cap_is_rejected_without_being_held() -> None:
    long_loop = edi834.subscriber("S1", "021", *["REF*17*X"] * 30)
    data = edi834.interchange(long_loop + edi834.subscriber("S2"))
    first, second = read_834(chunks(data), limits=ReadLimits(max_loop_segments=20))
    assert first.category == LOOP_SIZE and first.change is None
    assert first.error == ("loop: the member loop has 36 segments, more than 20 "
                           "(IMPORT_MAX_LOOP_SEGMENTS)")  # fmt: skip
    assert first.raw.count("\n") == 21 and first.raw.endswith("[16 more segment(s) not kept]\n")
    assert second.error is None


def test_a_transaction_set_header_over_the_cap_rejects_the_file() -> None:
    members = ["REF*38*X"] * 30 + edi834.subscriber("S1")
    from shared.imports.x12.reader import scan_envelope

    problems, _ = scan_envelope(chunks(edi834.interchange(members)),
                                limits=ReadLimits(max_loop_segments=20))  # fmt: skip
    assert any("header has more than 20 segments" in p for p in problems), problems


def test_a_segment_without_its_terminator_rejects_the_file_before_it_is_held() -> None:
    """pyx12 would take the file for ended where its buffer found no terminator."""
    data = edi834.interchange(edi834.subscriber("S1")).replace(b"N1*P5*", b"N1*P5*" + b"x" * 9000)
    with pytest.raises(SourceFileError, match=r"segment 5 \(line 5\) is longer than 4096"):
        check_envelope(chunks(data))


@pytest.mark.parametrize(
    ("dependents", "budget", "chunk_size"),
    [
        # the probe of issue 33 as it was filed: about 45 s of reading, so `make test-long`
        pytest.param(64_000, 5.0, 5000, marks=pytest.mark.long, id="64k"),
        # the same walk at a sixteenth of the size, in smaller chunks and budgets: more
        # invocations, each checkpointed inside the family (every `make test`)
        pytest.param(4_000, 0.2, 500, id="4k"),
    ],
)
def test_a_huge_dependent_family_is_refused_and_checkpointed_within_budget(
    imports_env: ImportsEnv,
    caplog: pytest.LogCaptureFixture,
    app_settings: AppSettings,
    dependents: int,
    budget: float,
    chunk_size: int,
) -> None:
    """The probe of issue 33: one subscriber with 64,000 dependents (4,000 in `make test`). Every
    member of the family is rejected as it is read (none held), the run checkpoints inside the
    family and hands itself on when its budget is spent, and the next family imports. (Reject
    caps raised: at the defaults the file stops at 10,000, test_reject_caps.py.)"""
    app_settings.set({"IMPORT_MAX_REJECTS": "100000", "IMPORT_MAX_REJECT_BYTES": str(1024**3)})
    data = edi834.interchange(family(dependents) + edi834.subscriber("S2"))
    imports_env.upload("acme", "huge.834", data)
    durations, token = [], 1
    with caplog.at_level(logging.INFO, logger="shared.imports"):
        while True:
            started = time.monotonic()
            report = run_import(RUN, token, email=False, budget_s=budget, chunk_size=chunk_size)
            durations.append(time.monotonic() - started)
            token += 1
            if report.status == "completed" or token > 100:
                break
    # budgets of 0.2 s: 16 invocations for 4,000 dependents on an idle 2-core machine
    assert report.status == "completed" and len(durations) > 4
    # each invocation stops at the first checkpoint past its budget: a chunk at most beyond
    assert max(durations) < budget + 30, durations
    (found,) = report.to_dict()["files"]
    records = dependents + 2
    assert (found["records"], found["rejected"], found["imported"]) == (records, records - 1, 1)
    assert found["reasons"] == {FAMILY_SIZE: records - 1}
    resumed = [int(m) for m in re.findall(r"at record (\d+) / byte", caplog.text)]
    assert any(10 < r < dependents * 4 for r in resumed), resumed  # inside the family
    assert list(imports_env.members("acme")) == ["S2"]
    lines = imports_env.rejected_lines("acme/rejected/2026-11-22/huge.834.rejected.jsonl")
    assert len(lines) == records - 1 and lines[-1]["reason"].startswith("family: more than 200")


@pytest.mark.parametrize(
    "name",
    ["../bob/incoming/x.834", "a/../../bob/x.csv", "a/./b.csv", "a//b.csv", "./x.csv",
     "x.csv/", "a\\..\\b.csv", "bad\x00.csv", "dots./x.csv", "x" * 513],
)  # fmt: skip
def test_file_names_that_cannot_go_into_blob_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidFileName) as raised:
        check_file_name(name)
    assert name not in str(raised.value)


def test_file_names_real_senders_use_pass() -> None:
    for name in ("members.csv", "2026/11/enrollment.834", "ACME 834 (1).edi", "é..x.834"):
        assert check_file_name(name) == name


def test_a_dot_dot_file_name_is_refused_where_it_enters(imports_env: ImportsEnv) -> None:
    """A blob whose name holds ".." segments (a raw REST upload can make one) is listed
    under incoming/, refused there with a clear reason, and nothing is derived from it:
    not read, not moved, not acknowledged, nothing written outside the account."""
    container = imports_container(create=True)
    sas = generate_container_sas(
        AZURITE_ACCOUNT, container.container_name, account_key=AZURITE_KEY,
        permission=ContainerSasPermissions(write=True, create=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )  # fmt: skip
    url = f"{container.url}/acme/incoming/%2E%2E/%2E%2E/bob/incoming/x.834?{sas}"
    answer = requests.put(url, data=edi834.interchange(edi834.subscriber("S1")),
                          headers={"x-ms-blob-type": "BlockBlob"}, timeout=10)  # fmt: skip
    assert answer.status_code == 201
    name = "acme/incoming/../../bob/incoming/x.834"
    assert imports_env.blob_names() == [name]
    imports_env.upload("acme", "good.834", edi834.interchange(edi834.subscriber("S2")))
    report = run_import(RUN, token=1, email=False).to_dict()
    files = {f["name"]: f for f in report["files"]}
    refused = files["../../bob/incoming/x.834"]
    assert refused["status"] == "refused" and refused["records"] == 0
    assert refused["error"] == "file name: has '..' path segment"
    assert report["totals"]["files_refused"] == 1 and files["good.834"]["status"] == "processed"
    assert name in imports_env.blob_names("acme/incoming/")  # left where it was
    assert not [n for n in imports_env.blob_names() if n.startswith("bob")]
    assert list(imports_env.members("acme")) == ["S2"]
    again = run_import(ImportRequest.manual("acme", date(2026, 11, 22)), 2, email=False)
    assert [f.status for f in again.files] == ["refused"]  # every run, until renamed


def test_import_settings_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    names = ("IMPORT_MAX_FAMILY_DEPENDENTS", "IMPORT_MAX_FILE_BYTES", "IMPORT_MAX_LOOP_SEGMENTS",
             "IMPORT_CHUNK_RECORDS", "IMPORT_WRITE_LANES")  # fmt: skip
    for name in names:
        monkeypatch.delenv(name, raising=False)
    assert ImportSettings.from_env() == ImportSettings()
    monkeypatch.setenv("IMPORT_MAX_FAMILY_DEPENDENTS", "50")
    assert check().max_family_dependents == 50
    for value in ("lots", "0", "2.5", "nan", "-1"):
        monkeypatch.setenv("IMPORT_MAX_FAMILY_DEPENDENTS", value)
        with pytest.raises(InvalidSetting, match="IMPORT_MAX_FAMILY_DEPENDENTS"):
            check()
    monkeypatch.setenv("IMPORT_MAX_FAMILY_DEPENDENTS", "50")
    monkeypatch.setenv("IMPORT_DEPENDENT_ID_KEY", "short")
    with pytest.raises(InvalidSetting, match="IMPORT_DEPENDENT_ID_KEY must be 16 to 64"):
        check()
    monkeypatch.setenv("IMPORT_DEPENDENT_ID_KEY", "s" * 32)
    assert "s" * 32 not in repr(check())  # the key never in a repr, a log, a report


def test_a_bad_import_setting_fails_the_app_at_start_up() -> None:
    """Indexed as the worker indexes it: the app does not start, the setting is named."""
    code = "import function_app"
    env = child_env(IMPORT_MAX_LOOP_SEGMENTS="many")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=120, check=False)  # fmt: skip
    assert result.returncode != 0
    assert "app setting IMPORT_MAX_LOOP_SEGMENTS must be a number, not 'many'" in result.stderr
    ok = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True,
                        text=True, timeout=120, check=False)  # fmt: skip
    assert ok.returncode == 0, ok.stderr[-2000:]


@pytest.fixture(autouse=True)
def _defaults(app_settings: AppSettings) -> None:
    app_settings.set({name: None for name in (
        "IMPORT_MAX_FILE_BYTES", "IMPORT_MAX_FAMILY_DEPENDENTS", "IMPORT_MAX_LOOP_SEGMENTS",
        "IMPORT_DEPENDENT_ID_KEY")})  # fmt: skip
