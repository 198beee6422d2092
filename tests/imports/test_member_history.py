"""834 imports on Azurite: members as the files say, their history, and the query on it."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import date

import pytest

from shared.imports import file_mover, importer
from shared.imports.history import member_status, run_events, terminations
from shared.imports.importer import run_import
from shared.imports.records import ACTIVE, TERMINATED
from shared.imports.request import ImportRequest
from shared.imports.validation import member_key
from shared.notifications import Notification
from tests.imports.edi834 import interchange, real, subscriber
from tests.imports.support import ImportsEnv

NIGHT_1 = ImportRequest.nightly("acme", date(2026, 11, 21))
NIGHT_2 = ImportRequest.nightly("acme", date(2026, 11, 22))
HLT = ("HD*021**HLT*GOLD*EMP", "DTP*348*D8*20260101")
DEN = ("HD*021**DEN*D1*EMP", "DTP*348*D8*20260101")


def enrolment(*ids: str) -> bytes:
    return interchange([s for i in ids for s in subscriber(i, coverages=HLT + DEN)])


def test_a_night_of_changes_leaves_members_as_the_file_says_and_tells_who_ended(
    imports_env: ImportsEnv,
    caplog: pytest.LogCaptureFixture,
    no_health_data_in: Callable[[list[str]], None],
) -> None:
    imports_env.upload("acme", "a.834", enrolment("S1", "S2", "S3"))
    run_import(NIGHT_1, token=1, email=False)
    odd_id = "A/B #1?"
    first = (
        subscriber("S1", "024", "DTP*357*D8*20261130", coverages=())
        + subscriber("S2", "001", coverages=("HD*001**HLT*SILVER*EMP", "DTP*348*D8*20261201"))
        + subscriber("S3", "024", "DTP*357*D8*20261031", coverages=())
        + subscriber("S5", "021", dmg="20261399", coverages=HLT)  # not a date: rejected
    )
    later = (
        subscriber("S1", "021", "DTP*356*D8*20261201", coverages=HLT)  # re-enrolled
        + subscriber(odd_id, "021", coverages=HLT)
        + subscriber(odd_id, "021", coverages=HLT)  # an identical repeat
    )
    imports_env.upload("acme", "b.834", interchange(first, later))

    with caplog.at_level(logging.DEBUG):
        report = run_import(NIGHT_2, token=2)

    (result,) = [f for f in report.files if f.name == "b.834"]
    counts = (result.added, result.changed, result.terminated, result.reinstated,
              result.unchanged, result.rejected)  # fmt: skip
    assert counts == (1, 1, 2, 1, 1, 1)
    ended = [(e.member_id, e.effective, e.status) for e in terminations("acme", "2026-11-22")]
    assert ended == [("S1", date(2026, 11, 30), TERMINATED), ("S3", date(2026, 10, 31), TERMINATED)]
    events = [(e.member_id, e.event) for e in run_events("acme", "2026-11-22")]
    assert events == [("S1", "termination"), ("S2", "change"), ("S3", "termination"),
                      ("S1", "reinstatement"), (odd_id, "add")]  # fmt: skip
    s1 = member_status("acme", "S1")
    assert s1 is not None and s1.status == ACTIVE
    assert [(c.line, c.begin, c.end) for c in s1.coverages] == [  # dental stays ended
        ("HLT", date(2026, 1, 1), None),
        ("DEN", date(2026, 1, 1), date(2026, 11, 30)),
    ]
    s2 = member_status("acme", "S2")
    assert s2 is not None and [(c.line, c.plan) for c in s2.coverages] == [
        ("DEN", "D1"), ("HLT", "SILVER")]  # fmt: skip
    s3 = member_status("acme", "S3")
    assert s3 is not None and s3.status == TERMINATED
    assert {c.end for c in s3.coverages} == {date(2026, 10, 31)}
    rows = imports_env.members("acme")
    assert rows[member_key(odd_id)]["MemberId"] == odd_id
    assert sorted(rows) == sorted(["S1", "S2", "S3", member_key(odd_id)])

    (rejected,) = imports_env.rejected_lines("acme/rejected/2026-11-22/b.834.rejected.jsonl")
    assert (rejected["member_id"], rejected["segment"], rejected["line"]) == ("S5", 23, 23)
    assert "DMG02" in rejected["reason"] and "20261399" not in rejected["reason"]
    (body,) = imports_env.messages(imports_env.notifications_queue)
    text = Notification.from_data(body).text or ""
    assert "1 added, 1 changed, 2 terminated, 1 reinstated, 1 unchanged; 1 rejected" in text
    no_health_data_in(["QUIXOTE", "ZELDA", "19800515", "1980-05-15"])


def test_an_audit_file_terminates_the_members_it_leaves_out(imports_env: ImportsEnv) -> None:
    imports_env.upload("acme", "a.834", enrolment("S1", "S2", "S3", "S4", "S5"))
    run_import(NIGHT_1, token=1, email=False)
    audit = interchange(
        subscriber("S1", "030", coverages=HLT)
        + subscriber("S2", "030", coverages=HLT)
        + subscriber("S3", "030", dmg="20261399", coverages=HLT)  # rejected: not "absent"
        + subscriber("S5", "030", dmg="20300101", coverages=HLT),  # born later: rejected too
        file_date="20261201",
    )
    imports_env.upload("acme", "full.834", audit)
    report = run_import(NIGHT_2, token=2, email=False)
    (result,) = [f for f in report.files if f.name == "full.834"]
    assert (result.unchanged, result.changed, result.terminated, result.rejected) == (0, 2, 1, 2)
    assert result.audit == (
        "1 member(s) absent from this audit file terminated, effective 2026-11-30"
    )
    assert [(e.member_id, e.effective, e.maintenance) for e in terminations("acme", "2026-11-22")
            ] == [("S4", date(2026, 11, 30), "030")]  # fmt: skip
    s4, s3 = member_status("acme", "S4"), member_status("acme", "S3")
    assert s4 is not None and s4.status == TERMINATED
    assert {c.end for c in s4.coverages} == {date(2026, 11, 30)}
    assert s3 is not None and s3.status == ACTIVE
    s5 = member_status("acme", "S5")
    assert s5 is not None and s5.status == ACTIVE
    s1 = member_status("acme", "S1")  # the audit loop is the member's whole state
    assert s1 is not None and [c.line for c in s1.coverages] == ["HLT"]


def test_a_change_file_leaves_absent_members_alone(imports_env: ImportsEnv) -> None:
    imports_env.upload("acme", "a.834", enrolment("S1", "S2"))
    silver = ("HD*001**HLT*SILVER*EMP", "DTP*348*D8*20260101")
    imports_env.upload("acme", "b.834", interchange(subscriber("S1", "001", coverages=silver)))
    report = run_import(NIGHT_1, token=1, email=False)
    assert report.files[1].audit is None
    # S1 was written by this run's first file: the second file finds it (not a new member)
    assert (report.files[1].added, report.files[1].changed) == (0, 1)
    assert [(e.source, e.member_id, e.event) for e in run_events("acme", "2026-11-21")] == [
        ("a.834", "S1", "add"), ("a.834", "S2", "add"), ("b.834", "S1", "change"),
    ]  # history in the order the run read it  # fmt: skip
    s2 = member_status("acme", "S2")
    assert s2 is not None and s2.status == ACTIVE


def test_a_retried_file_is_counted_and_recorded_as_if_read_once(
    imports_env: ImportsEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attempt 1 commits every member of the file and dies before moving it; attempt 2
    reads it again and must still call them adds (each row keeps its state before the file)."""
    imports_env.upload("acme", "a.834", enrolment("S1", "S2", "S3"))
    real_move = file_mover.move_blob

    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("instance died")

    monkeypatch.setattr(importer.file_mover, "move_blob", crash)
    with pytest.raises(RuntimeError):
        run_import(NIGHT_1, token=1, email=False)
    assert len(imports_env.members("acme")) == 3  # committed, file still in incoming/
    monkeypatch.setattr(importer.file_mover, "move_blob", real_move)
    report = run_import(NIGHT_1, token=2, email=False)
    assert (report.files[0].added, report.files[0].unchanged) == (3, 0)
    assert [e.event for e in run_events("acme", "2026-11-21")] == ["add"] * 3


def test_the_real_public_files_import(imports_env: ImportsEnv) -> None:
    names = ["pyx12_834_deident_new_enroll.txt", "pyx12_834_deident_family.txt",
             "pyx12_834_ls_le_ls.txt", "pyx12_834_deident_term.txt",
             "pyx12_multiple_st_loops.txt", "hccinfhir_sample_834_06.txt"]  # fmt: skip
    for i, name in enumerate(names):
        imports_env.upload("acme", f"{i}-{name}.834", real(name))
    report = run_import(NIGHT_1, token=1, email=False)
    got = {f.name.split("-", 1)[1][:-4]: (f.imported, f.rejected) for f in report.files}
    assert got == {
        "pyx12_834_deident_new_enroll.txt": (1, 0),
        "pyx12_834_deident_family.txt": (3, 0),  # dependents kept
        "pyx12_834_ls_le_ls.txt": (1, 0),  # member id "REF OF"
        "pyx12_834_deident_term.txt": (2, 0),  # terminations without DTP*348
        "pyx12_multiple_st_loops.txt": (4, 0),  # 1 add (an audit file: nobody else to end)
        "hccinfhir_sample_834_06.txt": (0, 2),  # placeholder birth dates
    }
    oregon = imports_env.members("acme")["REF OF"]
    assert oregon["DateOfBirth"] == "1983-07-19" and oregon["LastName"] == "SUBSCRIBER LAST 1"
    assert json.loads(oregon["Coverages"])[0]["line"] == "HMO"
