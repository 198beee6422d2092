"""The three functions, called the way the Python worker calls them, against Azurite."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, date, datetime

import azure.functions as func
import pytest
from azure.functions.timer import TimerRequest
from blobsingleton import BlobLease
from blobsingleton.config import scope_of
from blobsingleton.records import BlobRecordStore, Record, Status
from blobsingleton.schedules import fired_occurrence, previous_occurrence
from blobsingleton.testing import crashed_run

from functions.imports import (
    fan_out_night,
    import_account,
    import_under_lease,
    nightly_import,
    run_import_now,
)
from harness import import_samples as samples
from shared import storage
from shared.imports.keys import NIGHTLY_KEY
from shared.imports.request import ImportRequest
from tests.imports.support import ImportsEnv

NIGHT = "2026-01-15"


def RUN_RECORDS() -> BlobRecordStore:
    """The records of one account's run (`import_under_lease`'s own)."""
    return BlobRecordStore(scope=scope_of(import_under_lease))


def NIGHTLY_RECORDS() -> BlobRecordStore:
    """The records of the nightly fan-out (`fan_out_night`'s own)."""
    return BlobRecordStore(scope=scope_of(fan_out_night))


def timer(next_occurrence: str, *, past_due: bool = False) -> TimerRequest:
    status = {"Last": "2026-01-14T02:00:00+00:00", "Next": next_occurrence,
              "LastUpdated": "2026-01-14T02:00:01+00:00"}  # fmt: skip
    return TimerRequest(past_due=past_due, schedule_status=status)


def last_night() -> datetime:
    """The latest occurrence of the tests' IMPORT_SCHEDULE (within the catch-up window)."""
    return previous_occurrence("0 0 2 * * *", datetime.now(UTC))


def message(account: str, run_id: str = NIGHT) -> func.QueueMessage:
    body = ImportRequest(account=account, run_date=run_id[:10], run_id=run_id).to_json()
    return func.QueueMessage(id=f"msg-{account}", body=body.encode())


def http(account: str) -> func.HttpRequest:
    return func.HttpRequest("POST", f"/api/imports/{account}/run", body=b"",
                            route_params={"account": account})  # fmt: skip


def queue_count(name: str) -> int:
    props = storage.queue_client(name).get_queue_properties()
    return int(props.approximate_message_count or 0)


def test_every_instance_fires_the_timer_and_one_fan_out_happens(imports_env: ImportsEnv) -> None:
    for account in ("acme", "beta"):
        imports_env.upload(account, "a.csv", samples.csv_bytes(list(samples.members(2))))
    night = last_night()  # an older night would be past the timer's catch-up window
    assert nightly_import(timer(night.isoformat())) is None  # the worker's $return rule
    results = [fan_out_night(timer(night.isoformat())) for _ in range(3)]
    assert results[0]["accounts"] == ["acme", "beta"]
    assert results[1:] == [results[0]] * 2  # the stored result of the one fan-out
    bodies = imports_env.messages(imports_env.queue)
    run_id = night.date().isoformat()
    assert sorted((b["account"], b["run_id"]) for b in bodies) == [("acme", run_id),
                                                                   ("beta", run_id)]  # fmt: skip


def test_a_past_due_occurrence_is_caught_up_once(imports_env: ImportsEnv) -> None:
    imports_env.upload("acme", "a.csv", samples.csv_bytes(list(samples.members(2))))
    night = last_night()  # missed: the host's past-due run, within the catch-up window
    missed = timer(night.isoformat(), past_due=True)
    first = fan_out_night(missed)
    assert first["run_date"] == night.date().isoformat()
    nightly_import(timer(night.isoformat(), past_due=True))  # another instance
    assert len(imports_env.messages(imports_env.queue)) == 1


def test_a_fan_out_that_died_half_way_is_taken_over(imports_env: ImportsEnv) -> None:
    imports_env.upload("acme", "a.csv", samples.csv_bytes(list(samples.members(2))))
    night = last_night()
    fired = timer(night.isoformat())
    crashed_run(
        NIGHTLY_RECORDS(), NIGHTLY_KEY.format(occurrence=f"{night:%Y-%m-%dT%H:%M:%SZ}"), 0
    )  # died, record expired
    assert fan_out_night(fired)["accounts"] == ["acme"]
    assert len(imports_env.messages(imports_env.queue)) == 1


def test_the_run_date_is_the_occurrence_that_fired() -> None:
    now = datetime(2026, 11, 22, 2, 0, 3, tzinfo=UTC)
    on_time = timer("2026-11-22T02:00:00+00:00")
    assert fired_occurrence("0 0 2 * * *", on_time.schedule_status, now).date() == date(
        2026, 11, 22
    )
    stale_status = timer("2026-12-25T02:00:00+00:00")  # written under another schedule
    assert fired_occurrence("0 0 2 * * *", stale_status.schedule_status, now) == now.replace(
        second=0
    )
    no_status = TimerRequest(past_due=False, schedule_status=None)
    assert fired_occurrence("0 0 2 * * *", no_status.schedule_status, now) == now.replace(second=0)


def test_queue_delivery_imports_once_and_a_duplicate_does_nothing(
    imports_env: ImportsEnv,
) -> None:
    imports_env.upload("acme", "a.csv", samples.csv_bytes(list(samples.members(120))))
    import_account(message("acme"))
    assert len(imports_env.members("acme")) == 120
    imports_env.upload("acme", "late.csv", samples.csv_bytes(list(samples.members(5, prefix="L"))))
    import_account(message("acme"))  # the same run again: completed, not rerun
    assert len(imports_env.members("acme")) == 120
    attempts = imports_env.blob_names(f"acme/reports/{NIGHT}/attempts/")
    assert len(attempts) == 1


def test_an_invalid_message_goes_to_poison_with_nothing_run(imports_env: ImportsEnv) -> None:
    storage.queue_client(f"{imports_env.queue}-poison").create_queue()
    bad = json.dumps({"account": "../x", "run_date": NIGHT, "run_id": NIGHT}).encode()
    import_account(func.QueueMessage(id="bad", body=bad))
    assert queue_count(f"{imports_env.queue}-poison") == 1


def test_a_busy_account_defers_the_message(imports_env: ImportsEnv) -> None:
    msg = message("acme")
    with BlobLease("import-acme"):
        import_account(msg)
    assert queue_count(imports_env.queue) == 1  # a delayed copy, invisible for now
    assert imports_env.messages(imports_env.queue) == []


def test_an_in_progress_record_found_under_the_lease_is_taken_over_at_once(
    imports_env: ImportsEnv,
) -> None:
    """A crashed run left its in-progress record, expired by now; whoever holds the lease next
    takes it over at once."""
    imports_env.upload("acme", "a.csv", samples.csv_bytes(list(samples.members(10))))
    crashed_run(RUN_RECORDS(), f"import-acme-{NIGHT}", 0)
    started = time.monotonic()
    import_account(message("acme"))
    assert time.monotonic() - started < 10
    assert len(imports_env.members("acme")) == 10
    record = RUN_RECORDS().get(f"import-acme-{NIGHT}")
    assert record is not None and record.status == "completed" and record.attempt == 2


def test_a_record_that_still_looks_live_under_the_lease_is_a_lost_run_taken_over(
    imports_env: ImportsEnv,
) -> None:
    """Written with a long timeout under the account's lease by a holder that lost it (crashed,
    or paused and fenced off): a later holder (a higher token) knows it can only be that, so
    it is taken over now, not waited out (the record names the lease and token it ran under)."""
    imports_env.upload("acme", "a.csv", samples.csv_bytes(list(samples.members(10))))
    with BlobLease("import-acme") as lost:  # the holder that then crashed
        now = time.time()
        RUN_RECORDS().put_if_absent(
            Record(key=f"import-acme-{NIGHT}", status=Status.IN_PROGRESS, started_at=now,
                   expires_at=now + 300, ttl=300.0, owner="crashed-instance", lease=lost.key,
                   token=lost.token)
        )  # fmt: skip
    import_account(message("acme"))
    assert queue_count(imports_env.queue) == 0  # not deferred
    assert len(imports_env.members("acme")) == 10
    record = RUN_RECORDS().get(f"import-acme-{NIGHT}")
    assert record is not None and record.status == "completed" and record.attempt == 2


def test_http_run_queues_a_manual_run_under_the_same_lease(imports_env: ImportsEnv) -> None:
    imports_env.upload("acme", "a.csv", samples.csv_bytes(list(samples.members(3))))
    response = run_import_now(http("acme"))
    assert response.status_code == 202
    body = json.loads(response.get_body())
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}-manual-[0-9a-f]{8}", body["run_id"])
    (queued,) = imports_env.messages(imports_env.queue)
    assert (queued["account"], queued["run_id"], queued["trigger"]) == (
        "acme",
        body["run_id"],
        "manual",
    )
    import_account(func.QueueMessage(id="m", body=json.dumps(queued).encode()))
    report = imports_env.read_json(body["report"])
    assert report["trigger"] == "manual" and report["totals"]["imported"] == 3


def test_http_run_is_409_while_the_account_imports(imports_env: ImportsEnv) -> None:
    with BlobLease("import-acme"):
        response = run_import_now(http("acme"))
        other = run_import_now(http("beta"))
    assert response.status_code == 409
    assert json.loads(response.get_body())["error"] == "busy"
    assert json.loads(response.get_body())["account"] == "acme"
    assert other.status_code == 202  # accounts are independent


@pytest.mark.parametrize("account", ["../x", "..", "x" * 64, "a\x07b", "a\nb", "a b", ""])
def test_http_run_is_400_for_an_invalid_account(imports_env: ImportsEnv, account: str) -> None:
    response = run_import_now(http(account))
    assert response.status_code == 400
    body = json.loads(response.get_body())
    assert body["error"] == "invalid_account" and body["detail"]
    assert imports_env.messages(imports_env.queue) == []
