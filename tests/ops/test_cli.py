"""The command line, as an operator runs it: real processes against Azurite."""

from __future__ import annotations

import json
import subprocess
import sys

from blobsingleton import BlobLease
from blobsingleton.config import namespace
from blobsingleton.records import Status

from tests.ops.support import OpsEnv, hold_lock, put_record, start_job, write_import_report
from tests.support import ROOT, child_env


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = child_env()
    return subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, env=env, timeout=60,
        cwd=ROOT, check=False,
    )  # fmt: skip


def test_locks_and_runs_as_a_table_and_as_json(ops_env: OpsEnv) -> None:
    held = hold_lock("import-acme", function="import_account", invocation="inv-7")
    put_record("import-acme-2026-11-22", Status.COMPLETED)
    try:
        table = run("blobsingleton.ops", "locks")
        assert table.returncode == 0, table.stderr
        where, header, row = table.stdout.splitlines()[:3]
        assert where == f"namespace: {namespace()}"  # says whose locks these are
        assert header.split()[:4] == ["KEY", "SCOPE", "HELD", "TOKEN"]
        assert row.split()[:3] == ["import-acme", "True", str(held.token)]
        assert "import_account" in row and "inv-7" in row

        locks = json.loads(run("blobsingleton.ops", "locks", "--json").stdout)
        assert [item["key"] for item in locks["items"]] == ["import-acme"]
        assert locks["namespace"] == namespace()
        elsewhere = run("blobsingleton.ops", "locks", "--namespace", "another-app", "--json")
        assert json.loads(elsewhere.stdout)["items"] == []  # another app's: none of ours
        runs = run("blobsingleton.ops", "runs", "--state", "completed", "--json")
        assert [item["key"] for item in json.loads(runs.stdout)["items"]] == [
            "import-acme-2026-11-22"
        ]
    finally:
        held.release()


def test_break_and_reset_need_a_reason_and_are_audited(ops_env: OpsEnv) -> None:
    held = hold_lock("import-acme")
    put_record("import-acme-2026-11-22", Status.COMPLETED)
    missing = run("blobsingleton.ops", "break", "import-acme")
    assert missing.returncode == 2 and "--reason" in missing.stderr
    empty = run("blobsingleton.ops", "break", "import-acme", "--reason", " ")
    assert empty.returncode == 2 and "a reason is required" in empty.stderr
    bad = run("blobsingleton.ops", "break", "../etc", "--reason", "x")
    assert bad.returncode == 2 and "path segment" in bad.stderr

    broke = run("blobsingleton.ops", "break", "import-acme", "--reason", "stuck", "--json")
    assert broke.returncode == 0, broke.stderr
    assert json.loads(broke.stdout)["token"] == held.token
    taken = BlobLease("import-acme").acquire(blocking=False)
    assert taken.token > held.token
    taken.release()
    reset = run("shared.ops", "reset", "import-acme-2026-11-22", "--reason", "re-run")
    assert reset.returncode == 0, reset.stderr
    assert "reason: re-run" in reset.stdout
    actions = sorted((e["action"], e["reason"]) for e in ops_env.audit_entries())
    assert actions == [("break", "stuck"), ("reset", "re-run")]
    assert all(e["by"].endswith("(cli)") for e in ops_env.audit_entries())
    held.release()


def test_the_apps_jobs_and_imports_views(ops_env: OpsEnv) -> None:
    start_job("export-1", units=2)
    write_import_report("acme", "2026-11-22", imported=50, rejected=1)
    jobs = run("shared.ops", "jobs", "--json")
    assert jobs.returncode == 0, jobs.stderr
    [job] = json.loads(jobs.stdout)["items"]
    assert (job["job_id"], job["units_outstanding"]) == ("export-1", 2)
    imports = run("shared.ops", "imports")
    assert imports.returncode == 0, imports.stderr
    row = imports.stdout.splitlines()[1].split()
    assert row[:3] == ["acme", "2026-11-22", "completed"] and "50" in row
