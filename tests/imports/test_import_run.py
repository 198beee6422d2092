"""Whole import runs on Azurite: what lands in the table, in rejected/, processed/, reports/."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import date

import pytest

from harness import import_samples as samples
from shared.imports import file_mover
from shared.imports.importer import run_import
from shared.imports.layout import imports_container
from shared.imports.records import FIELDS
from shared.imports.request import ImportRequest
from shared.notifications import Notification
from tests.imports.support import ImportsEnv

RUN = ImportRequest.nightly("acme", date(2026, 11, 22))
HEADER = ",".join(FIELDS) + "\n"


def test_csv_and_834_members_are_imported_and_files_moved(imports_env: ImportsEnv) -> None:
    csv_rows = list(samples.members(250, prefix="C", bad_every=100))
    edi_rows = list(samples.members(12, prefix="E"))
    imports_env.upload("acme", "members.csv", samples.csv_bytes(csv_rows))
    imports_env.upload("acme", "enrollment.834", samples.edi_bytes(edi_rows))

    report = run_import(RUN, token=5)

    rows = imports_env.members("acme")
    assert len(rows) == 248 + 12
    first = rows["C0000000"]
    assert (first["FirstName"], first["DateOfBirth"], first["Plan"]) == (
        csv_rows[0].first_name,
        csv_rows[0].date_of_birth,
        csv_rows[0].plan,
    )
    assert (first["SourceFile"], first["SourceLocation"], first["FencingToken"]) == (
        "members.csv",
        "line 2",
        5,
    )
    assert rows["E0000003"]["SourceLocation"].startswith("segment ")
    assert imports_env.blob_names("acme/incoming/") == []
    assert imports_env.blob_names("acme/processed/") == [
        "acme/processed/2026-11-22/enrollment.834",
        "acme/processed/2026-11-22/members.csv",
    ]
    rejected = imports_env.rejected_lines("acme/rejected/2026-11-22/members.csv.rejected.jsonl")
    assert [(r["location"], r["member_id"]) for r in rejected] == [
        ("line 101", "C0000099"),
        ("line 201", "C0000199"),
    ]
    assert rejected[0]["reason"] == "date_of_birth: is not a date (YYYY-MM-DD)"
    assert rejected[0]["record"].startswith("C0000099,")
    saved = imports_env.read_json("acme/reports/2026-11-22/report.json")
    assert saved["status"] == "completed" and saved["token"] == 5
    assert saved["totals"]["records"] == 262
    assert saved["totals"]["imported"] == 260 and saved["totals"]["rejected"] == 2
    assert saved["files"][1]["reasons"] == {"date_of_birth": 2}
    assert report.summary()["imported"] == 260
    attempt = imports_env.read_json("acme/reports/2026-11-22/attempts/000000000005.json")
    assert attempt["outcome"] == "completed" and attempt["finished_at"] >= attempt["started_at"]


def test_one_summary_email_is_queued_for_the_notification_path(imports_env: ImportsEnv) -> None:
    imports_env.upload("acme", "a.csv", samples.csv_bytes(list(samples.members(3))))
    run_import(RUN, token=1)
    (body,) = imports_env.messages(imports_env.notifications_queue)
    notification = Notification.from_data(body)
    assert notification.event_id == "import-acme-2026-11-22"
    assert notification.to == ("ops@example.com",)
    assert "3 imported" in notification.subject
    assert samples.members(1).__next__().first_name not in (notification.text or "")


def test_bad_input_is_reported_and_nothing_is_lost(
    imports_env: ImportsEnv,
    caplog: pytest.LogCaptureFixture,
    no_health_data_in: Callable[[list[str]], None],
) -> None:
    secret = "Zelda,Quixote,1971-03-14"
    rows = (
        f"A1,{secret},GOLD,2026-01-01,\n"  # good
        "A2,Zelda,Quixote,1971-03-14,GOLD,2026-01-01\n"  # 6 columns
        "A3,Zelda,Quixote,14/03/1971,GOLD,2026-01-01,\n"  # bad date
        f"A1,{secret},SILVER,2026-01-01,\n"  # duplicate id
        "A4,Zelda,Quixote,1971-03-14,GOLD,2026-06-01,2026-01-01\n"  # end before start
    ).encode() + b"A5,Zeld\xe1,Quixote,1971-03-14,GOLD,2026-01-01,\n"  # not UTF-8
    imports_env.upload("acme", "mixed.csv", HEADER.encode() + rows)
    imports_env.upload("acme", "noheader.csv", f"A9,{secret},GOLD,2026-01-01,\n".encode())
    imports_env.upload("acme", "empty.csv", b"")
    edi = samples.edi_bytes(list(samples.members(5, prefix="E")))
    imports_env.upload("acme", "truncated.834", edi[: len(edi) * 2 // 3])
    imports_env.upload("acme", "notes.txt", b"hello")

    with caplog.at_level(logging.DEBUG):
        report = run_import(RUN, token=2)

    by_name = {f.name: f for f in report.files}
    mixed = by_name["mixed.csv"]
    assert (mixed.status, mixed.records, mixed.imported, mixed.rejected) == ("processed", 6, 1, 5)
    assert dict(mixed.reasons) == {"format": 2, "date_of_birth": 1, "duplicate": 1,
                                   "coverage_end": 1}  # fmt: skip
    lines = imports_env.rejected_lines("acme/rejected/2026-11-22/mixed.csv.rejected.jsonl")
    assert [(r["location"], r["reason"]) for r in lines] == [
        ("line 3", "has 6 column(s), expected 7"),
        ("line 4", "date_of_birth: is not a date (YYYY-MM-DD)"),
        ("line 5", "member_id: conflicting duplicate in this file, first at line 2"),
        ("line 6", "coverage_end: is before coverage_start"),
        ("line 7", "not valid UTF-8 (first bad byte at column 8)"),
    ]
    assert "record_base64" in lines[-1]  # the original bytes are kept
    assert sorted(imports_env.members("acme")) == ["A1"]
    for name, reason in [("noheader.csv", "wrong header"), ("empty.csv", "empty file"),
                         ("truncated.834", "X12 envelope errors"),
                         ("notes.txt", "unsupported file type")]:  # fmt: skip
        assert by_name[name].status == "rejected" and reason in (by_name[name].error or "")
        error = imports_env.read_json(f"acme/rejected/2026-11-22/{name}.error.json")
        assert reason in error["reason"]
        assert f"acme/rejected/2026-11-22/{name}" in imports_env.blob_names("acme/rejected/")
    assert imports_env.blob_names("acme/incoming/") == []  # everything is somewhere else now
    no_health_data_in(["Zelda", "Zeld", "Quixote", "1971-03-14", "14/03/1971"])


@pytest.mark.slow
@pytest.mark.long
def test_100k_rows_finish_in_one_invocation_with_progress_logged(
    imports_env: ImportsEnv, caplog: pytest.LogCaptureFixture
) -> None:
    imports_env.upload("big", "big.csv", samples.csv_bytes(samples.members(100_000)))
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="shared.imports"):
        report = run_import(ImportRequest.nightly("big", date(2026, 11, 22)), 1, email=False)
    elapsed = time.monotonic() - started
    assert report.imported == 100_000
    assert elapsed < 600, f"{elapsed:.0f} s: over the 10-minute function timeout"
    progress = [r.getMessage() for r in caplog.records if "rows/s" in r.getMessage()]
    assert len(progress) >= elapsed // 5 - 2  # a line about every 5 seconds
    assert "big.csv" in progress[0] and "imported" in progress[0]


def test_a_takeover_keeps_the_files_an_earlier_attempt_finished(imports_env: ImportsEnv) -> None:
    """Attempt 1 finished a.csv (it left incoming/) and died; attempt 2's report lists it."""
    imports_env.upload("acme", "a.csv", samples.csv_bytes(list(samples.members(3))))
    run_import(RUN, token=1, email=False)
    imports_env.upload("acme", "b.csv", samples.csv_bytes(list(samples.members(4, prefix="B"))))
    report = run_import(RUN, token=2, email=False)
    assert [(f.name, f.token, f.imported) for f in report.files] == [
        ("a.csv", 1, 3),
        ("b.csv", 2, 4),
    ]
    assert imports_env.read_json("acme/reports/2026-11-22/report.json")["totals"]["imported"] == 7


def test_a_second_run_with_nothing_new_is_empty(imports_env: ImportsEnv) -> None:
    imports_env.upload("acme", "a.csv", samples.csv_bytes(list(samples.members(3))))
    run_import(RUN, token=1, email=False)
    again = run_import(ImportRequest.nightly("acme", date(2026, 11, 23)), token=2, email=False)
    assert again.files == [] and again.status == "completed"
    assert {r["FencingToken"] for r in imports_env.members("acme").values()} == {1}


def test_a_file_replaced_during_the_import_is_left_in_incoming(imports_env: ImportsEnv) -> None:
    container = imports_container(create=True)
    imports_env.upload("acme", "a.csv", b"version 1")
    etag = container.get_blob_client("acme/incoming/a.csv").get_blob_properties().etag
    container.upload_blob("acme/incoming/a.csv", b"version 2", overwrite=True)
    with pytest.raises(file_mover.SourceChanged):
        file_mover.move_blob(container, "acme/incoming/a.csv", "acme/processed/x/a.csv", etag)
    assert imports_env.read("acme/incoming/a.csv") == b"version 2"
    assert imports_env.blob_names("acme/processed/") == []
