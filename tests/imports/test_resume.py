"""Chunked, checkpointed imports: readers resume at a byte offset, runs span invocations,
a lost attempt's rows after the checkpoint are redone once, and a stale holder is fenced."""

from __future__ import annotations

import json
import logging
from datetime import date
from typing import Any

import azure.functions as func
import pytest

from harness import import_samples as samples
from shared import storage
from shared.imports.checkpoint import CheckpointStore
from shared.imports.csv_reader import read_csv
from shared.imports.importer import run_import
from shared.imports.layout import Layout, imports_container
from shared.imports.member_table import (
    EVENT_PREFIX,
    FencedMemberWriter,
    Provenance,
    StaleHolder,
    members_table,
)
from shared.imports.records import Member, SourceRecord
from shared.imports.request import ImportRequest
from shared.imports.text_stream import ChunkedText
from shared.imports.x12.members import FileFacts
from shared.imports.x12.reader import read_834, scan_envelope
from tests.imports import edi834
from tests.imports.support import ImportsEnv, killed_before_sweep_checkpoint
from tests.support import LosesAnswers, blob_service_over

RUN = ImportRequest.nightly("acme", date(2026, 11, 22))
TWIN = ImportRequest.nightly("twin", date(2026, 11, 22))


def _from(data: bytes, point: dict[str, Any] | None) -> ChunkedText:
    """The file's text from `point`'s byte offset, in odd-sized pieces (as a range read)."""
    offset = int(point["offset"]) if point else 0
    rest = data[offset:]
    return ChunkedText((rest[i : i + 41] for i in range(0, len(rest), 41)), start=offset)


def _key(records: list[SourceRecord]) -> list[tuple[int, str | None, str | None, str]]:
    return [(r.number, r.member_id, r.error, r.raw) for r in records]


# -- readers ---------------------------------------------------------------------------------


def test_a_csv_resumes_after_any_record_with_exactly_the_records_that_follow() -> None:
    header = "member_id,first_name,last_name,date_of_birth,plan,coverage_start,coverage_end\r\n"
    rows = [
        "A1,ÉMILE,Ñ,1980-01-01,GOLD,2026-01-01,\r\n",
        "\r\n",  # blank line
        'A2,"two\nlines",X,1980-01-01,GOLD,2026-01-01,\r\n',
        "A3,b,X,1980-01-01,GOLD\r\n",  # wrong column count
    ]
    data = (
        "\ufeff" + header + "".join(rows)
    ).encode() + b"A4,\xff\xfe,X,1980-01-01,G,2026-01-01,\n"
    data += b"A5,e,X,1980-01-01,GOLD,2026-01-01,\n"
    full = list(read_csv(_from(data, None)))
    assert [r.member_id for r in full] == ["A1", "A2", None, None, "A5"]
    for i, record in enumerate(full):
        assert record.resume is not None
        rest = list(read_csv(_from(data, record.resume), record.resume))
        assert _key(rest) == _key(full[i + 1 :]), f"resumed after record {i}"


def _two_sets_with_families() -> bytes:
    first = []
    for n in range(6):
        first += edi834.subscriber(f"S{n:03d}")
        first += [  # a dependent with its own id: one family, read whole
            "INS*N*19*021*25*A", f"REF*0F*S{n:03d}", f"REF*23*D{n:03d}",
            "NM1*IL*1*QUIXOTE*ZED", "DMG*D8*20100101*M", "HD*021**HLT*GOLD*FAM",
            "DTP*348*D8*20260101",
        ]  # fmt: skip
    second = []
    for n in range(6):
        second += edi834.subscriber(f"T{n:03d}")
    second += edi834.subscriber("S001", "024", "DTP*357*D8*20260630")  # the same member later
    return edi834.interchange(first, second)


def test_an_834_resumes_in_the_middle_of_a_transaction_set() -> None:
    data = _two_sets_with_families()
    facts = FileFacts()
    full = list(read_834(_from(data, None), facts))
    points = [(i, r.resume) for i, r in enumerate(full) if r.resume is not None]
    # a resume point after each family but the last of a set: never inside a family
    assert all(full[i].member_id.startswith(("D", "T")) for i, _ in points)
    assert len(points) == 5 + 5 + 1
    for i, point in points:
        assert point is not None
        resumed_facts = FileFacts()
        rest = list(read_834(_from(data, point), resumed_facts, point))
        assert _key(rest) == _key(full[i + 1 :]), f"resumed after record {i}"
        assert [r.change for r in rest] == [r.change for r in full[i + 1 :]]
        assert resumed_facts == facts  # transaction sets counted and BGN date as from the top


def test_a_resumed_834_still_checks_the_set_trailer_counts() -> None:
    """Resumed mid-set, pyx12 counts as if it had read from the top: a wrong SE01 in the
    second set is still found, and a right one does not raise a false alarm."""
    data = _two_sets_with_families()
    point = next(r.resume for r in read_834(_from(data, None)) if r.resume is not None)
    assert scan_envelope(_from(data, point), point)[0] == []
    text = data.decode()
    se = text.rindex("SE*")
    count = text[se + 3 : text.index("*", se + 3)]
    broken = (text[: se + 3] + str(int(count) + 1) + text[se + 3 + len(count) :]).encode()
    problems, _ = scan_envelope(_from(broken, point), point)
    assert any("SE count" in p for p in problems), problems


def test_the_envelope_pass_stops_at_member_loops_and_resumes_to_the_end() -> None:
    data = _two_sets_with_families()
    calls = {"n": 0}

    def every_third() -> bool:
        calls["n"] += 1
        return calls["n"] % 3 == 0

    stops = []
    problems, point = scan_envelope(_from(data, None), None, every_third)
    while point is not None:
        stops.append(point["segment"])
        problems, point = scan_envelope(_from(data, point), point, every_third)
        assert problems == []
    assert len(stops) >= 5 and stops == sorted(set(stops))


# -- runs over several invocations ---------------------------------------------------------


def _until_done(request: ImportRequest, first_token: int, **options: Any) -> list[str]:
    """run_import again and again (new token each time, as each invocation leases anew)
    until the run completes; returns the statuses."""
    statuses = []
    token = first_token
    while True:
        report = run_import(request, token, email=False, **options)
        statuses.append(report.status)
        if report.status == "completed" or len(statuses) > 200:
            return statuses
        token += 1


def _table_state(imports_env: ImportsEnv, account: str) -> dict[str, Any]:
    keep = ("MemberId", "Status", "Coverages", "StatusEffective", "FirstName", "DateOfBirth")
    members = {k: {f: r.get(f) for f in keep} for k, r in imports_env.members(account).items()}
    rows = members_table().query_entities(f"PartitionKey eq '{account}'")
    events = sorted(
        (r["RowKey"].rsplit("~", 1)[-1], r["MemberId"], r["Event"])
        for r in rows
        if r["RowKey"].startswith(EVENT_PREFIX)
    )
    return {"members": members, "events": events}


def _totals(imports_env: ImportsEnv, request: ImportRequest) -> dict[str, Any]:
    totals = imports_env.read_json(Layout(request.account, request.run_id).report)["totals"]
    return {k: v for k, v in totals.items() if k != "rows_per_s"}


def test_a_csv_run_spans_invocations_and_imports_every_member_once(
    imports_env: ImportsEnv, caplog: pytest.LogCaptureFixture
) -> None:
    data = samples.csv_bytes(list(samples.members(700, bad_every=50)))
    data += b"M0000003,OTHER,NAME,1980-01-01,GOLD,2026-01-01,\r\n"  # line 1 of 7 again, changed
    for account in ("acme", "twin"):
        imports_env.upload(account, "members.csv", data)
    assert _until_done(TWIN, 1) == ["completed"]
    with caplog.at_level(logging.INFO, logger="shared.imports"):
        statuses = _until_done(RUN, 10, budget_s=0, chunk_size=100)
    assert statuses == ["continued"] * 7 + ["completed"]  # one chunk per invocation
    assert "resuming run 2026-11-22 of account acme at record 102 / byte " in caplog.text
    assert "invocation 8 of the run)" in caplog.text
    twin, acme = _table_state(imports_env, "twin"), _table_state(imports_env, "acme")
    assert acme["members"] == twin["members"] and len(acme["members"]) == 686
    assert _totals(imports_env, RUN) == _totals(imports_env, TWIN)
    rejected = "acme/rejected/2026-11-22/members.csv.rejected.jsonl"
    lines = imports_env.rejected_lines(rejected)
    assert [x["line"] for x in lines] == [51 + 50 * i for i in range(14)] + [702]  # each once
    assert lines[-1]["reason"] == "member_id: conflicting duplicate in this file, first at line 5"
    assert imports_env.blob_names("acme/incoming/") == []


def _834_run_data() -> bytes:
    return _two_sets_with_families()


def test_an_834_run_spans_invocations_mid_set_and_applies_records_in_file_order(
    imports_env: ImportsEnv, caplog: pytest.LogCaptureFixture
) -> None:
    data = _834_run_data()
    for account in ("acme", "twin"):
        imports_env.upload(account, "enrollment.834", data)
    assert _until_done(TWIN, 1) == ["completed"]
    with caplog.at_level(logging.INFO, logger="shared.imports"):
        statuses = _until_done(RUN, 10, budget_s=0, chunk_size=3)
    assert len(statuses) > 4 and statuses[-1] == "completed"
    assert "(envelope pass;" in caplog.text and "(members pass;" in caplog.text
    twin, acme = _table_state(imports_env, "twin"), _table_state(imports_env, "acme")
    assert acme == twin
    assert acme["members"]["S001"]["Status"] == "terminated"  # the later record won
    assert _totals(imports_env, RUN) == _totals(imports_env, TWIN)


def test_rows_committed_after_the_last_checkpoint_by_a_lost_attempt_are_redone_once(
    imports_env: ImportsEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attempt 1 commits chunk 3 (S001's termination among it) and dies before saving the
    checkpoint; attempt 2 resumes at chunk 3: the termination is applied to the state S001
    had before chunk 3, counted and written to the history once."""
    data = _834_run_data()
    for account in ("acme", "twin"):
        imports_env.upload(account, "enrollment.834", data)
    _until_done(TWIN, 1)
    killed_before_sweep_checkpoint(
        monkeypatch, lambda: run_import(RUN, 10, email=False, chunk_size=4)
    )
    saved = json.loads(imports_env.read(Layout("acme", RUN.run_id).checkpoint))
    assert saved["phase"] == "members" and saved["next_record"] > 0
    rows = imports_env.members("acme")
    assert rows["S001"]["Status"] == "terminated"  # the lost attempt did commit it
    assert _until_done(RUN, 11) == ["completed"]
    assert _table_state(imports_env, "acme") == _table_state(imports_env, "twin")
    assert _totals(imports_env, RUN) == _totals(imports_env, TWIN)


def test_a_stale_holder_can_neither_move_the_checkpoint_nor_claim_it(
    imports_env: ImportsEnv,
) -> None:
    container = imports_container(create=True)
    older = CheckpointStore(container, "acme/cp.json", "acme", 3)
    older.claim()
    older.save({"next_record": 10})
    newer = CheckpointStore(container, "acme/cp.json", "acme", 4)
    assert newer.claim()["next_record"] == 10
    with pytest.raises(StaleHolder):
        older.save({"next_record": 20})
    with pytest.raises(StaleHolder, match="token 3 < 4"):
        CheckpointStore(container, "acme/cp.json", "acme", 3).claim()
    assert json.loads(container.download_blob("acme/cp.json").readall())["token"] == 4


def test_a_checkpoint_save_whose_answer_was_lost_is_not_taken_for_a_newer_holder(
    imports_env: ImportsEnv,
) -> None:
    imports_container(create=True)
    transport = LosesAnswers()
    container = blob_service_over(transport).get_container_client(imports_env.container)
    store = CheckpointStore(container, "acme/cp.json", "acme", 3)
    store.claim()
    transport.arm(lambda request: request.method == "PUT")
    store.save({"next_record": 10})  # sent twice by the SDK: the copy met its own ETag (412)
    assert transport.lost == 1
    store.save({"next_record": 20})  # and the ETag it goes on from is the landed one
    assert json.loads(container.download_blob("acme/cp.json").readall())["next_record"] == 20
    newer = CheckpointStore(container, "acme/cp.json", "acme", 4)
    newer.claim()
    with pytest.raises(StaleHolder):  # a real newer holder still fences it off
        store.save({"next_record": 30})


def test_a_newer_holder_fences_every_lane_before_it_writes(imports_env: ImportsEnv) -> None:
    def member(i: int) -> Member:
        return Member(f"M{i:05d}", "Zelda", "Quixote", date(1971, 3, 14), "GOLD",
                      date(2026, 1, 1), None)  # fmt: skip

    older = FencedMemberWriter("acme", 3, "r", lanes=4, batch_size=5)
    older.open()
    for i in range(40):
        older.add(member(i), Provenance("r", "a.csv", f"line {i}"))
    older.flush()
    assert older.transactions >= 8  # 4 lanes, batches of 5
    FencedMemberWriter("acme", 4, "r", lanes=4).open()
    with pytest.raises(StaleHolder):  # at the first transaction it sends, or at the flush
        for i in range(40, 80):
            older.add(member(i), Provenance("r", "a.csv", f"line {i}"))
        older.flush()
    assert sorted(imports_env.members("acme")) == [f"M{i:05d}" for i in range(40)]


def test_a_continuing_run_is_requeued_and_completes_its_run_once_record_once(
    imports_env: ImportsEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    from functions.imports import import_account

    monkeypatch.setenv("IMPORT_INVOCATION_BUDGET_S", "0.001")
    monkeypatch.setenv("IMPORT_CHUNK_RECORDS", "100")
    imports_env.upload("acme", "a.csv", samples.csv_bytes(list(samples.members(350))))
    body = RUN.to_json().encode()
    queue = storage.queue_client(imports_env.queue)
    deliveries = 0
    import_account(func.QueueMessage(id="m0", body=body))
    while True:
        found = list(queue.receive_messages(max_messages=1))
        if not found:
            break
        assert json.loads(found[0].content) == json.loads(body)  # same run id: not a new run
        queue.delete_message(found[0])
        deliveries += 1
        import_account(func.QueueMessage(id=f"m{deliveries}", body=body))
    assert deliveries == 3  # 350 rows, 100 a chunk: 4 invocations
    assert len(imports_env.members("acme")) == 350
    report = imports_env.read_json(Layout("acme", RUN.run_id).report)
    assert (report["status"], report["totals"]["imported"]) == ("completed", 350)
    import_account(func.QueueMessage(id="dup", body=body))  # a late duplicate: stored result
    assert list(queue.receive_messages(max_messages=1)) == []
