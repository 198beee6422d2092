"""The operator's HTTP API against Azurite: listings, filters, pages, break, reset, bad input."""

from __future__ import annotations

import threading
from datetime import date

import pytest
from blobsingleton import BlobLease, LeaseLost, once, ops
from blobsingleton.config import scope_of
from blobsingleton.leases import FairLease, read_lock
from blobsingleton.records import Status

from functions import ops as api
from shared.imports.member_table import FencedMemberWriter, Provenance, StaleHolder
from shared.imports.records import Member
from tests.ops.support import (
    AS_OPERATOR,
    OpsEnv,
    call,
    hold_lock,
    put_record,
    start_job,
    wait_for,
    write_import_report,
)


def test_locks_show_holder_token_and_filter_by_prefix_in_pages(ops_env: OpsEnv) -> None:
    held = hold_lock("import-acme", function="import_account", invocation="inv-42")
    BlobLease("import-beta").acquire(timeout=10).release()
    hold_lock("email-1").release()
    try:
        status, body = call(api.ops_locks, params={"prefix": "import-"})
        assert status == 200 and body["next"] is None
        by_key = {item["key"]: item for item in body["items"]}
        assert set(by_key) == {"import-acme", "import-beta"}
        acme = by_key["import-acme"]
        assert (acme["held"], acme["token"], acme["function"], acme["invocation_id"]) == (
            True, held.token, "import_account", "inv-42")  # fmt: skip
        assert acme["instance"] and acme["since"]
        assert by_key["import-beta"]["held"] is False and by_key["import-beta"]["instance"] is None

        first = call(api.ops_locks, params={"limit": "1"})[1]
        assert len(first["items"]) == 1 and first["next"]
        second = call(api.ops_locks, params={"limit": "1", "next": first["next"]})[1]
        assert second["items"][0]["key"] != first["items"][0]["key"]
    finally:
        held.release()


def test_locks_count_the_fair_waiters_in_line(ops_env: OpsEnv) -> None:
    held = hold_lock("import-acme")
    waiter_done = threading.Event()

    def wait_in_line() -> None:
        FairLease("import-acme").acquire(timeout=60).release()
        waiter_done.set()

    threading.Thread(target=wait_in_line, daemon=True).start()

    def waiting() -> int:
        [item] = call(api.ops_locks, params={"prefix": "import-acme"})[1]["items"]
        return int(item["waiting"])

    wait_for(lambda: waiting() == 1)
    held.release()
    assert waiter_done.wait(timeout=30)
    assert waiting() == 0


def test_runs_filter_by_state_and_prefix(ops_env: OpsEnv) -> None:
    put_record("import-acme-2026-11-22", Status.COMPLETED, result={"imported": 10})
    put_record("import-beta-2026-11-22", Status.IN_PROGRESS)
    put_record("import-gamma-2026-11-22", Status.IN_PROGRESS, expires_in=-1)
    put_record("email-9", Status.COMPLETED)

    def keys(**params: str) -> dict[str, str]:
        status, body = call(api.ops_runs, params=params)
        assert status == 200
        return {item["key"]: item["state"] for item in body["items"]}

    assert keys(prefix="import-", state="completed") == {"import-acme-2026-11-22": "completed"}
    assert keys(prefix="import-", state="expired") == {"import-gamma-2026-11-22": "expired"}
    assert len(keys()) == 4
    done = call(api.ops_runs, params={"prefix": "import-acme"})[1]["items"][0]
    assert done["owner"] == "host-7" and done["outcome"] == {"imported": 10}  # an operator
    assert "outcome" not in ops.list_runs("import-acme").items[0]  # only when asked for


def test_jobs_and_imports_views(ops_env: OpsEnv) -> None:
    start_job("nightly-export", units=3)
    write_import_report("acme", "2026-11-22", imported=120, rejected=2)
    status, jobs = call(api.ops_jobs)
    assert status == 200
    [job] = jobs["items"]
    assert (job["job_id"], job["total"], job["units_outstanding"]) == ("nightly-export", 3, 3)
    status, imports = call(api.ops_imports)
    assert status == 200
    [acme] = imports["items"]
    assert (acme["account"], acme["status"], acme["imported"], acme["rejected"]) == (
        "acme", "completed", 120, 2)  # fmt: skip
    assert acme["report"]["run_id"] == "2026-11-22"


@pytest.mark.parametrize(
    ("function", "route_params", "params", "body", "message"),
    [
        (api.ops_break_lock, {"key": "../x"}, {}, {"reason": "r"}, "path segment"),
        (api.ops_break_lock, {"key": "a\x00b"}, {}, {"reason": "r"}, "control characters"),
        (api.ops_break_lock, {"key": "x" * 300}, {}, {"reason": "r"}, "limit is 256"),
        (api.ops_break_lock, {"key": "ok"}, {}, {}, "a reason is required"),
        (api.ops_break_lock, {"key": "ok"}, {}, {"reason": "  "}, "a reason is required"),
        (api.ops_reset_run, {"key": "ok"}, {}, b"not json", "must be JSON"),
        (api.ops_reset_run, {"key": "/etc"}, {}, {"reason": "r"}, "path segment"),
        (api.ops_locks, {}, {"prefix": "../"}, None, "invalid prefix"),
        (api.ops_locks, {}, {"limit": "0"}, None, "limit must be 1 to 200"),
        (api.ops_runs, {}, {"state": "bogus"}, None, "state must be one of"),
    ],
)
def test_bad_input_is_a_400_that_says_what(
    ops_env: OpsEnv, function: object, route_params: dict[str, str], params: dict[str, str],
    body: object, message: str,
) -> None:  # fmt: skip
    status, answer = call(function, "POST", params=params, route_params=route_params, body=body)
    assert status == 400
    assert message in answer["error"]


def test_break_and_reset_of_what_is_not_there(ops_env: OpsEnv) -> None:
    assert call(api.ops_break_lock, route_params={"key": "nope"}, body={"reason": "x"})[0] == 404
    BlobLease("free-one").acquire(timeout=10).release()
    status, body = call(api.ops_break_lock, route_params={"key": "free-one"}, body={"reason": "x"})
    assert status == 409 and "not held" in body["error"]
    assert call(api.ops_reset_run, route_params={"key": "nope"}, body={"reason": "x"})[0] == 404
    assert ops_env.audit_entries() == []


def _member(i: int) -> Member:
    return Member(f"M{i:05d}", "Ada", "Byron", date(1980, 1, 1), "GOLD", date(2026, 1, 1), None)


def test_a_break_fences_out_the_old_holder(ops_env: OpsEnv) -> None:
    """After a break the old holder still runs, but its next fenced write is refused."""
    old = hold_lock("import-acme")
    old_writer = FencedMemberWriter("acme", old.token, "run-1")
    old_writer.open()
    old_writer.add(_member(1), Provenance("run-1", "a.csv", "line 1"))
    assert old_writer.flush() == 1

    # a client-sent principal name is not who: the verified key's name is
    headers = {**AS_OPERATOR, "Content-Type": "application/json",
               "x-ms-client-principal-name": "someone-else@x"}  # fmt: skip
    status, broken = call(
        api.ops_break_lock, "POST", route_params={"key": "import-acme"},
        body={"reason": "holder hung at 02:30"}, headers=headers,
    )  # fmt: skip
    assert status == 200
    assert broken["token"] == old.token
    [entry] = ops_env.audit_entries()
    assert (entry["action"], entry["key"], entry["reason"], entry["by"]) == (
        "break", "import-acme", "holder hung at 02:30", "operator key 'tests'")  # fmt: skip
    assert entry["previous"]["token"] == old.token

    new = BlobLease("import-acme").acquire(blocking=False)  # free at once after the break
    assert new.token > broken["token"]
    new_writer = FencedMemberWriter("acme", new.token, "run-1")
    new_writer.open()

    old_writer.add(_member(2), Provenance("run-1", "a.csv", "line 2"))
    with pytest.raises(StaleHolder):
        old_writer.flush()
    assert old.lost.wait(timeout=15)  # its next renewal finds the lease broken
    with pytest.raises(LeaseLost):
        old.ensure_held()
    state = read_lock("import-acme")
    assert state is not None and state.token == new.token
    new.release()
    old.release()


def test_reset_lets_a_run_once_key_run_again(ops_env: OpsEnv) -> None:
    runs: list[str] = []

    @once("import-{account}-2026-11-22")
    def import_once(account: str) -> None:
        runs.append(account)

    import_once("acme")
    import_once("acme")
    assert runs == ["acme"]
    status, body = call(
        api.ops_reset_run, "POST", route_params={"key": "import-acme-2026-11-22"},
        body={"reason": "re-run tonight after the fix"}, params={"scope": scope_of(import_once)},
    )  # fmt: skip
    assert status == 200 and body["previous"]["state"] == "completed"
    assert ops_env.audit_entries()[0]["action"] == "reset"
    import_once("acme")
    assert runs == ["acme", "acme"]
