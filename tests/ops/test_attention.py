"""What needs a person, through the API and the CLI (issue 51): filters applied by the listing,
failures that were only logged, times in ISO, and the docs' break and reset run as written."""

from __future__ import annotations

import json
import logging
import re
import shlex
import threading
from collections.abc import Iterator

import pytest
from blobsingleton import BlobLease, ops
from blobsingleton.events import emit
from blobsingleton.records import Status

from functions import ops as api
from shared import ops_notes, ops_tally
from tests.ops.browser import (
    EXPIRED,
    FAILING_JOB,
    IMPORT_SCOPE,
    IN_PROGRESS,
    POISON_REASON,
    REJECT_REASON,
    seed,
)
from tests.ops.support import OpsEnv, call, failing_receiver, hold_lock, write_import_report
from tests.ops.test_cli import run
from tests.support import ROOT

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")


@pytest.fixture
def scenario(ops_env: OpsEnv) -> Iterator[list[BlobLease]]:
    with failing_receiver() as url:
        leases = seed(url)
    yield leases
    for lease in leases:
        lease.release()


def test_a_state_filter_lists_both_in_progress_records_among_69_on_the_first_page(
    scenario: list[BlobLease],
) -> None:
    assert sum(ops.count_runs().values()) == 69
    status, body = call(api.ops_runs, params={"state": "in_progress"})
    assert status == 200
    assert sorted(item["key"] for item in body["items"]) == sorted(IN_PROGRESS)
    assert body["next"] is None and body["partial"] is False
    table = run("shared.ops", "runs", "--state", "in_progress")
    assert table.returncode == 0, table.stderr
    rows = table.stdout.splitlines()[2:]
    assert sorted(row.split()[0] for row in rows) == sorted(IN_PROGRESS)
    assert "(none)" not in table.stdout and "--next" not in table.stdout
    # a prefix is the listing's: the first page of 10 holds the one match
    [expired] = call(api.ops_runs, params={"prefix": EXPIRED, "limit": "10"})[1]["items"]
    assert expired["state"] == "expired" and expired["expires_in_s"] < 0
    status, held = call(api.ops_locks, params={"held": "true"})
    assert sorted(item["key"] for item in held["items"]) == ["email-evt-1042", "import-acme"]


def test_the_overview_shows_what_was_only_logged(scenario: list[BlobLease]) -> None:
    status, body = call(api.ops_overview)
    assert status == 200
    assert body["counts"]["runs"] == {"in_progress": 2, "completed": 66, "expired": 1}
    assert body["counts"]["locks held"] == 2
    states = {r["key"]: r["state"] for r in body["runs"]}
    assert states == {**dict.fromkeys(IN_PROGRESS, "in_progress"), EXPIRED: "expired"}
    [job] = body["failing_callbacks"]
    assert (job["job_id"], job["state"], job["status"]) == (FAILING_JOB, "callback failing",
                                                          "succeeded")  # fmt: skip
    failing = job["callback_failing"]
    assert (failing["http_status"], failing["tries"], failing["reason"]) == (500, 1, "HTTP 500")
    assert ISO.match(failing["last_try"]) and ISO.match(failing["next_try"])
    [poisoned] = [q for q in body["poison"] if q["count"]]
    assert poisoned["queue"].endswith("-poison") and poisoned["count"] == 1
    assert poisoned["newest"][0]["reason"] == POISON_REASON
    [row] = body["rejected_rows"]
    assert (row["account"], row["line"], row["reason"]) == ("acme", 3, REJECT_REASON)
    assert "M-0003" not in json.dumps(body)  # the member id is never shown
    assert (
        body["reset_effects"][api.notifications.RECORD_SCOPE] == "the event's email is sent again"
    )
    # the CLI: the failing callback is not "succeeded", and times are ISO, never epoch numbers
    jobs = run("shared.ops", "jobs")
    assert jobs.returncode == 0, jobs.stderr
    [line] = [line for line in jobs.stdout.splitlines() if line.startswith(FAILING_JOB)]
    assert "callback failing" in line and "HTTP 500" in line
    assert not re.search(r"\b1[78]\d{8}(\.\d+)?\b", jobs.stdout)
    summary = {f["figure"]: f["value"] for f in call(api.ops_summary_last_hour)[1]["figures"]}
    assert summary["callbacks failing, retried by the watcher"] == 1


def test_a_lost_lease_is_noted_and_counted(ops_env: OpsEnv) -> None:
    holder = hold_lock("import-zeta", function="import_account")
    ops.break_lock("import-zeta", "hung", "ops@test")
    assert holder.lost.wait(timeout=30)  # its next renewal finds the lease broken
    holder.release()
    [lost] = call(api.ops_overview)[1]["lost_leases"]
    assert (lost["key"], lost["function"]) == ("import-zeta", "import_account")
    assert lost["reason"] and ISO.match(lost["at"])
    summary = {f["figure"]: f for f in call(api.ops_summary_last_hour)[1]["figures"]}
    assert summary["leases lost by their holder"]["value"] == 1


def test_the_charts_are_the_instances_event_tallies(ops_env: OpsEnv) -> None:
    """An instance's handler counts the library's events and writes them; the charts sum every
    instance's. (A handler of its own here: the process's also counts the earlier tests'
    events, their leases' renewals included.)"""
    events = logging.getLogger("blobsingleton.events")
    level = events.level
    tally = ops_tally.EventTally(instance="charts-test")
    before = {s["name"]: sum(s["values"]) for s in ops_tally.series()["series"]}
    events.setLevel(logging.INFO)
    events.addHandler(tally)
    try:
        for kind in ("completed", "completed", "busy_skip", "lost"):
            emit(kind, key="charts-1")
    finally:
        events.removeHandler(tally)
        events.setLevel(level)
    for thread in threading.enumerate():  # the first event's write, on its own thread
        if thread.name == "ops-tally":
            thread.join(timeout=30)
    tally.write()
    blobs = [b.name for b in ops_notes.notes_container().list_blobs(name_starts_with="tally/")]
    assert any(name.endswith("/charts-test.json") for name in blobs)
    after = {s["name"]: sum(s["values"]) for s in ops_tally.series()["series"]}
    grown = {name: after[name] - before[name] for name in after}
    assert grown["invocations"] >= 2 and grown["waits"] >= 1 and grown["failures"] >= 1
    mine = json.loads(ops_notes.notes_container().download_blob(
        next(n for n in blobs if n.endswith("/charts-test.json"))).readall())  # fmt: skip
    assert mine == {"completed": 2, "busy_skip": 1, "lost": 1}
    charts = call(api.ops_summary_last_hour)[1]["charts"]
    assert len(charts["starts"]) == 12 and all(len(s["values"]) == 12 for s in charts["series"])


def _documented(command: str) -> list[str]:
    """The docs' example line of `command` (python -m shared.ops COMMAND ...), as argv."""
    text = (ROOT / "docs" / "operations.md").read_text()
    [line] = [line for line in text.splitlines()
              if line.startswith(f"python -m shared.ops {command} ")]  # fmt: skip
    return shlex.split(line.split("#")[0])[2:]


def test_the_docs_break_and_reset_examples_work_as_written(ops_env: OpsEnv) -> None:
    """The reset example names an import run's record, kept under its function's scope: the
    command finds it there without --scope and says so."""
    from tests.ops.support import put_record

    held = hold_lock("import-acme")
    put_record("import-acme-2026-11-23", Status.COMPLETED, scope=IMPORT_SCOPE)
    try:
        for command in ("break", "reset"):
            argv = _documented(command)
            done = run(*argv)
            assert done.returncode == 0, (argv, done.stderr)
        entries = {e["action"]: e for e in ops_env.audit_entries()}
        assert entries["reset"]["scope"] == IMPORT_SCOPE
        assert entries["break"]["scope"] is None
    finally:
        held.release()
    # the same key under two functions: it asks which, naming both
    put_record("dup-1", Status.COMPLETED, scope="functions.a")
    put_record("dup-1", Status.COMPLETED, scope="functions.b")
    both = run("shared.ops", "reset", "dup-1", "--reason", "x")
    assert both.returncode == 2 and "functions.a, functions.b" in both.stderr


def test_an_accounts_last_import_that_read_data_is_shown_beside_a_later_empty_run(
    ops_env: OpsEnv,
) -> None:
    write_import_report("acme", "2026-11-27-arrival", imported=3, rejected=0)
    write_import_report("acme", "2026-11-28-manual", imported=0, rejected=0)
    [acme] = call(api.ops_imports)[1]["items"]
    assert acme["run_id"] == "2026-11-28-manual" and acme["records"] == 0
    assert acme["last_with_data"]["run_id"] == "2026-11-27-arrival"
    assert acme["last_with_data"]["totals"]["imported"] == 3


def test_the_docs_state_the_listings_request_bound_as_the_code_has_it() -> None:
    from blobsingleton import _listing

    text = (ROOT / "docs" / "operations.md").read_text()
    assert f"at most {_listing.MAX_SCAN_REQUESTS} List Blobs requests per" in " ".join(text.split())
