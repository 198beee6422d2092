"""The status page's last-hour figures, read from the stores (shared/ops_summary.py): what was
written in the hour counts, what was written before it does not, each figure says where it
comes from, and the answer holds counts only."""

from __future__ import annotations

import json
import time
from typing import Any

from blobsingleton import ops
from blobsingleton.records import Status

from functions import ops as api
from functions.notifications import RECORD_SCOPE
from shared import ops_summary, storage
from tests.ops.support import (
    OpsEnv,
    call,
    hold_lock,
    put_record,
    report_container,
    start_job,
    write_import_report,
)


def _by_name(answer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["figure"]: f for f in answer["figures"]}


def test_the_last_hours_figures_come_from_the_stores_and_say_which(ops_env: OpsEnv) -> None:
    put_record("email-evt-1", Status.COMPLETED, scope=RECORD_SCOPE, result={"to": "a@b.c"})
    put_record("email-evt-2", Status.COMPLETED, scope=RECORD_SCOPE)
    put_record("email-evt-3", Status.IN_PROGRESS, scope=RECORD_SCOPE)  # sending: not sent yet
    put_record("import-acme-2026-11-23", Status.IN_PROGRESS, attempt=2)  # a crashed run's
    write_import_report("acme", "2026-11-23", imported=1180, rejected=3)
    write_import_report("beta", "2026-11-23", imported=412, rejected=0)
    attempts = storage.blob_service().get_container_client(report_container())
    for token in (4, 5):  # the run began with token 4; token 5 resumed it
        attempts.upload_blob(f"acme/reports/2026-11-23/attempts/{token:012d}.json", b"{}")
    start_job("running-job", units=2)
    start_job("empty-job", units=0)  # no units: its outcome is recorded at once, succeeded
    lease = hold_lock("import-stuck")
    ops.break_lock("import-stuck", "hung", "tests")
    lease.release()

    status, answer = call(api.ops_summary_last_hour)
    assert status == 200
    figures = _by_name(answer)
    counts = {name: f["value"] for name, f in figures.items()}
    assert counts["emails sent"] == 2
    assert counts["crashed runs taken over"] == 1
    assert counts["runs completed"] == 2
    assert (counts["records imported"], counts["records rejected"]) == (1592, 3)
    assert counts["invocations that resumed a run"] == 1
    assert (counts["jobs succeeded"], counts["jobs failed"]) == (1, 0)
    assert counts["locks broken by an operator"] == 1
    assert counts["other run-once keys completed"] == 0
    assert "run-once records" in figures["emails sent"]["source"]
    assert "report.json" in figures["records imported"]["source"]
    assert "completion.json" in figures["jobs succeeded"]["source"]
    # what no store keeps is said, with the metric to look at, never guessed
    deferred = figures["emails deferred (a send of the event in progress)"]
    assert deferred["value"] is None and "app.emails" in deferred["source"]
    lost = figures["leases lost by their holder"]
    assert lost["value"] == 0 and "lost-lease notes" in lost["source"]
    assert "a@b.c" not in json.dumps(answer)  # counts, never a run's outcome

    later = _by_name(ops_summary.last_hour(api.FLOWS, now=time.time() + 2 * 3600))
    assert {name: f["value"] for name, f in later.items() if f["value"]} == {}
