"""A file's rejects are capped (IMPORT_MAX_REJECTS, IMPORT_MAX_REJECT_BYTES): junk stops the
file with a clear reason, keeps what came before, costs at most the caps whatever its size,
and a killed or repeated attempt neither passes the cap nor counts twice (issue 42, part 4)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import date
from typing import Any

import pytest
from azure.storage.blob import BlobBlock

from harness import import_samples as samples
from shared.imports import file_mover
from shared.imports.checkpoint import CheckpointStore
from shared.imports.config import ImportSettings, check
from shared.imports.importer import MAX_ENVELOPE_PROBLEMS, run_import
from shared.imports.layout import Layout
from shared.imports.records import SourceRecord
from shared.imports.rejects import RejectWriter
from shared.imports.request import ImportRequest
from shared.imports.staged_blob import MAX_BLOCKS
from shared.imports.text_stream import ChunkedText
from shared.imports.x12.reader import scan_envelope
from shared.settings import InvalidSetting
from tests.imports import edi834
from tests.imports.support import ImportsEnv, Killed
from tests.support import AppSettings

RUN = ImportRequest.nightly("acme", date(2026, 11, 22))
TWIN = ImportRequest.nightly("twin", date(2026, 11, 22))
LAYOUT = Layout("acme", RUN.run_id)


def _rejected(env: ImportsEnv, name: str, account: str = "acme") -> bytes:
    return env.read(Layout(account, RUN.run_id).rejected_records(name))


def _file(report: Any, name: str) -> dict[str, Any]:
    return next(f for f in report.to_dict()["files"] if f["name"] == name)


def _until_done(request: ImportRequest, first_token: int, **options: Any) -> list[str]:
    statuses, token = [], first_token
    while True:
        report = run_import(request, token, email=False, **options)
        statuses.append(report.status)
        if report.status == "completed" or len(statuses) > 100:
            return statuses
        token += 1


# -- the settings ----------------------------------------------------------------------------


def test_the_reject_caps_have_defaults_and_are_checked_at_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("IMPORT_MAX_REJECTS", "IMPORT_MAX_REJECT_BYTES"):
        monkeypatch.delenv(name, raising=False)
    assert (check().max_rejects, check().max_reject_bytes) == (10_000, 16 * 1024**2)
    monkeypatch.setenv("IMPORT_MAX_REJECTS", "50")
    monkeypatch.setenv("IMPORT_MAX_REJECT_BYTES", "4096")
    assert (check().max_rejects, check().max_reject_bytes) == (50, 4096)
    for name, bad in (("IMPORT_MAX_REJECTS", "0"), ("IMPORT_MAX_REJECTS", "1.5"),
                      ("IMPORT_MAX_REJECTS", "lots"), ("IMPORT_MAX_REJECT_BYTES", "100"),
                      ("IMPORT_MAX_REJECT_BYTES", str(5 * 1024**3))):  # fmt: skip
        monkeypatch.setenv(name, bad)
        with pytest.raises(InvalidSetting, match=name):
            check()
        monkeypatch.setenv(name, "4096")
    assert "max_rejects=4096" in repr(ImportSettings.from_env())


# -- the writer: caps and the block limit (an in-memory blob) ------------------------------------


class _MemoryBlob:
    """The two calls `StagedBlob` makes, kept in memory; the block limit enforced as Azure
    does on the commit."""

    blob_name = "memory"

    def __init__(self) -> None:
        self.staged: dict[str, bytes] = {}
        self.committed: list[bytes] = []

    def stage_block(self, block_id: str, data: bytes) -> None:
        self.staged[block_id] = data

    def commit_block_list(self, blocks: list[BlobBlock], **_: Any) -> None:
        if len(blocks) > MAX_BLOCKS:
            raise ValueError(f"{len(blocks)} blocks: over the limit of one blob")
        # blocks staged by an earlier attempt (a checkpoint's count) are not in this memory
        self.committed = [self.staged.get(b.id, b"") for b in blocks]


def _record(number: int, raw: str = "a\n") -> SourceRecord:
    return SourceRecord(number, "line", raw, error="has 1 column(s), expected 7")


def test_the_writer_refuses_the_reject_that_would_pass_a_cap_and_writes_nothing_of_it() -> None:
    blob = _MemoryBlob()
    by_count = RejectWriter(blob, "a.csv", max_count=3, max_bytes=1024**2)
    assert [by_count.add(_record(n), "bad") for n in range(1, 6)] == [True] * 3 + [False] * 2
    assert by_count.count == 3 and "IMPORT_MAX_REJECTS=3" in str(by_count.passed)
    assert by_count.commit() and len(b"".join(blob.committed).splitlines()) == 3
    by_bytes = RejectWriter(_MemoryBlob(), "a.csv", max_count=10**6, max_bytes=2048)
    while by_bytes.add(_record(by_bytes.count + 1, "x" * 300), "bad"):
        pass
    assert 0 < by_bytes.bytes <= 2048 < by_bytes.bytes + 450  # full: the next did not fit
    assert "IMPORT_MAX_REJECT_BYTES=2048" in str(by_bytes.passed)
    huge = RejectWriter(_MemoryBlob(), "a.csv", max_count=10, max_bytes=2048)
    assert not huge.add(_record(1, "x" * 5000), "bad") and huge.count == huge.bytes == 0


def test_a_checkpoint_after_every_reject_still_leaves_one_blob_under_the_block_limit() -> None:
    """Caps far above the default, a checkpoint after each reject (each stages a block):
    the writer stops before the rejected file would need more blocks than one blob has."""
    blob = _MemoryBlob()
    start = MAX_BLOCKS - 50
    writer = RejectWriter(blob, "a.csv", blocks=start, max_count=10**9, max_bytes=4 * 1024**3)
    added = 0
    while writer.add(_record(added + 1), "bad"):
        added += 1
        writer.stage()
    assert added == 49 and "blocks" in str(writer.passed)
    writer.commit()
    assert len(blob.committed) == MAX_BLOCKS - 1  # the next checkpoint could stage one more


# -- CSV against Azurite ---------------------------------------------------------------------


def test_a_junk_csv_stops_at_the_record_cap_keeping_what_came_before(
    imports_env: ImportsEnv, app_settings: AppSettings, caplog: pytest.LogCaptureFixture,
    no_health_data_in: Any,
) -> None:  # fmt: skip
    good = list(samples.members(30))
    junk = samples.junk_csv_short_lines(200_000)  # 100,000 junk lines
    data = samples.csv_bytes(good) + junk.split(b"\n", 1)[1]
    imports_env.upload("acme", "members.csv", data)
    app_settings.set({"IMPORT_MAX_REJECTS": "100"})
    with caplog.at_level(logging.INFO, logger="shared.imports"):
        report = run_import(RUN, 1, email=False, chunk_size=40)
    found = _file(report, "members.csv")
    assert found["status"] == "stopped"
    assert found["error"].startswith("stopped at line 132: more than IMPORT_MAX_REJECTS=100 "
                                     "rejected records; the file was not read further: 30 "
                                     "record(s) imported before it stay imported, 100 "
                                     "rejected record(s)")  # fmt: skip
    assert (found["records"], found["imported"], found["rejected"]) == (130, 30, 100)
    assert report.to_dict()["totals"]["files_stopped"] == 1 and report.status == "completed"
    rejected = _rejected(imports_env, "members.csv")
    assert len(rejected.splitlines()) == 100
    assert len(rejected) < 200 * 100 < len(data) / 10  # what junk cost: bounded by the cap
    assert len(imports_env.members("acme")) == 30
    assert imports_env.blob_names("acme/incoming/") == []
    assert imports_env.read(LAYOUT.rejected_file("members.csv")) == data  # kept for a rerun
    reason = imports_env.read_json(LAYOUT.rejected_reason("members.csv"))
    assert reason["reason"] == found["error"]
    assert "members.csv stopped: stopped at line 132" in caplog.text
    no_health_data_in([m.first_name for m in good] + [m.last_name for m in good])


def test_an_unterminated_quote_costs_at_most_the_byte_cap(
    imports_env: ImportsEnv, app_settings: AppSettings
) -> None:
    """The quoted field runs to the csv module's field limit (one 128 KiB reject), then each
    line is a reject: 4 MB of input, the rejected file at most the byte cap."""
    data = samples.junk_csv_unterminated_quote(4 * 1024**2)
    imports_env.upload("acme", "quote.csv", data)
    cap = 256 * 1024
    app_settings.set({"IMPORT_MAX_REJECT_BYTES": str(cap)})
    found = _file(run_import(RUN, 1, email=False), "quote.csv")
    assert found["status"] == "stopped" and "IMPORT_MAX_REJECT_BYTES=262144" in found["error"]
    rejected = _rejected(imports_env, "quote.csv")
    assert cap - 200 < len(rejected) <= cap
    assert found["rejected"] == len(rejected.splitlines()) < len(data) / 2 / 100


def test_junk_at_the_default_caps_costs_less_than_its_own_size(imports_env: ImportsEnv) -> None:
    """The issue's probe: 2 MB of `a` lines made 1,000,000 rejects (146 MB). Now 10,000."""
    data = samples.junk_csv_short_lines(2 * 1024**2)
    imports_env.upload("acme", "junk.csv", data)
    found = _file(run_import(RUN, 1, email=False), "junk.csv")
    assert (found["status"], found["rejected"], found["records"]) == ("stopped", 10_000, 10_000)
    assert len(_rejected(imports_env, "junk.csv")) < len(data)


# -- resume: killed after the cap, or run again ----------------------------------------------------


def _kill_at(monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """Die at the stop's checkpoint (`checkpoint`: before it is saved) or at the move of
    the stopped file (`move`: after the stop's checkpoint and the rejects' commit)."""
    if where == "checkpoint":
        real_save = CheckpointStore.save

        def dying_save(self: CheckpointStore, state: dict[str, Any]) -> None:
            if state.get("phase") == "stopped":
                raise Killed
            real_save(self, state)

        monkeypatch.setattr(CheckpointStore, "save", dying_save)
    else:

        def dying_move(container: Any, source: str, destination: str, etag: str) -> None:
            raise Killed

        monkeypatch.setattr(file_mover, "move_blob", dying_move)


@pytest.mark.parametrize("where", ["checkpoint", "move"])
def test_an_attempt_killed_after_the_cap_neither_passes_it_nor_counts_twice(
    imports_env: ImportsEnv, app_settings: AppSettings, monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:  # fmt: skip
    rows = list(samples.members(400, bad_every=3))  # a reject every 3rd row
    data = samples.csv_bytes(rows)
    for account in ("acme", "twin"):
        imports_env.upload(account, "members.csv", data)
    app_settings.set({"IMPORT_MAX_REJECTS": "50"})
    assert _until_done(TWIN, 1, chunk_size=20) == ["completed"]
    with monkeypatch.context() as patched:
        _kill_at(patched, where)
        with pytest.raises(Killed):
            run_import(RUN, 10, email=False, chunk_size=20)
    saved = json.loads(imports_env.read(LAYOUT.checkpoint))
    assert saved["phase"] == ("stopped" if where == "move" else "members")
    assert _until_done(RUN, 11, chunk_size=20) == ["completed"]
    again = run_import(ImportRequest.manual("acme", date(2026, 11, 22)), 12, email=False)
    assert again.files == []  # the stopped file left incoming: nothing read twice
    twin_report = imports_env.read_json(Layout("twin", RUN.run_id).report)
    acme_report = imports_env.read_json(LAYOUT.report)
    keep = ("status", "records", "imported", "rejected", "added", "error", "reasons")
    assert [{k: f[k] for k in keep} for f in acme_report["files"]] == [
        {k: f[k] for k in keep} for f in twin_report["files"]
    ]
    assert acme_report["files"][0]["rejected"] == 50
    assert _rejected(imports_env, "members.csv") == _rejected(imports_env, "members.csv", "twin")
    assert imports_env.members("acme").keys() == imports_env.members("twin").keys()
    assert imports_env.blob_names("acme/incoming/") == []


# -- 834 ---------------------------------------------------------------------------------------


def test_a_junk_834_stops_at_the_cap_acknowledged_rejected_and_terminates_nobody(
    imports_env: ImportsEnv, app_settings: AppSettings
) -> None:
    """An audit file (every loop 030) whose member loops turn to junk: stopped at the cap,
    its 999 says R, and the member it left out is not terminated (the file was not read to
    its end)."""
    imports_env.upload("acme", "a.834", edi834.interchange(edi834.subscriber("KEEP")))
    run_import(ImportRequest.manual("acme", date(2026, 11, 21)), 1, email=False)
    junk = ["INS*Y*18*030*XN*A*E**FT", "REF*0F*J1", "NM1*IL*1*X*Y", "DMG*D8*NOTADATE*F"]
    data = edi834.interchange(edi834.subscriber("S1", "030") + junk * 200)
    imports_env.upload("acme", "junk.834", data)
    app_settings.set({"IMPORT_MAX_REJECTS": "20"})
    report = run_import(RUN, 2, email=False, chunk_size=7)
    found = _file(report, "junk.834")
    assert found["status"] == "stopped" and found["rejected"] == 20 and found["imported"] == 1
    assert found["error"].startswith("stopped at segment ")
    assert found["ack"] == "999 R" and found["audit"] is None
    assert len(_rejected(imports_env, "junk.834").splitlines()) == 20
    members = imports_env.members("acme")
    assert members["KEEP"]["Status"] == "active" and members["S1"]["Status"] == "active"
    ack = imports_env.read(LAYOUT.ack("junk.834", "999"))
    assert b"\nAK9*R*" in ack and b"IK5*R*" in ack and len(ack) < len(data)


def test_a_junk_834_without_an_envelope_is_rejected_whole_for_the_price_of_a_read(
    imports_env: ImportsEnv,
) -> None:
    data = samples.junk_834_noise(1024**2)
    imports_env.upload("acme", "noise.834", data)
    found = _file(run_import(RUN, 1, email=False), "noise.834")
    assert found["status"] == "rejected" and found["rejected"] == 0
    assert found["error"].startswith("X12 envelope errors")
    assert found["error"].endswith("; 95 more (not read further)")
    written = [n for n in imports_env.blob_names("acme/") if "/incoming/" not in n]
    sizes = sum(len(imports_env.read(n)) for n in written if not n.endswith("/noise.834"))
    assert sizes < 20_000  # reason, report, checkpoint, acknowledgment: not the file's size


def test_the_envelope_pass_stops_reading_junk_at_its_problem_cap() -> None:
    """Noise after an ISA is a problem per segment and has no INS to checkpoint at: the
    envelope pass stops at MAX_ENVELOPE_PROBLEMS instead of reading (and holding a problem
    for) every segment of the file."""
    noise = samples.junk_834_noise(64 * 1024**2)  # 64 MiB offered
    served = 0

    def chunks() -> Iterator[bytes]:
        nonlocal served
        for start in range(0, len(noise), 64 * 1024):
            served += 64 * 1024
            yield noise[start : start + 64 * 1024]

    found, resume = scan_envelope(ChunkedText(chunks()), max_problems=MAX_ENVELOPE_PROBLEMS)
    assert resume is None and len(found) >= MAX_ENVELOPE_PROBLEMS
    assert served <= 2 * 64 * 1024  # read: about 100 segments of 6 bytes, not 64 MiB
