"""The import summary through the notification path when a run is run again (issue 23).

Design (docs/notifications.md): one summary email per account per run. Its event id is
`import-{account}-{run_id}` and its content a function of the run's outcome only, so a re-run
of the same run (a takeover after a crash between the enqueue and the run-once completion)
renders the same notification, a true duplicate; a new run (a manual one) has its own id.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace
from datetime import date

from azure.core.exceptions import ResourceNotFoundError
from azure.functions.queue import QueueMessage

from functions.notifications import send_notification
from harness import import_samples as samples
from shared import storage
from shared.imports.importer import run_import
from shared.imports.report import RunReport
from shared.imports.request import ImportRequest
from shared.imports.summary_email import summary_notification
from shared.notifications import read_outbox
from tests.imports.support import ImportsEnv

RUN = ImportRequest.nightly("acme", date(2026, 11, 22))


def test_the_summary_does_not_depend_on_the_attempt() -> None:
    first = RunReport("acme", "2026-11-22", "2026-11-22", "nightly", token=1, instance="a",
                      started_at=1000.0, finished_at=1012.5, status="completed")  # fmt: skip
    rerun = replace(first, token=7, instance="b", started_at=5000.0, finished_at=5000.2)
    blob = "imports/acme/reports/2026-11-22/report.json"
    assert summary_notification(first, blob, ["ops@example.com"]) == summary_notification(
        rerun, blob, ["ops@example.com"]
    )


def test_a_re_run_sends_its_summary_once_and_poisons_nothing(imports_env: ImportsEnv) -> None:
    imports_env.upload("acme", "a.csv", samples.csv_bytes(list(samples.members(3))))
    imports_env.upload("acme", "b.csv", samples.csv_bytes(list(samples.members(4, prefix="B"))))
    run_import(RUN, token=1)  # enqueues its summary, then "dies" before its completion record
    run_import(RUN, token=2)  # the takeover: files from the report, nothing left in incoming
    run_import(ImportRequest.manual("acme", date(2026, 11, 22)), token=3)  # a new run

    queued = imports_env.messages(imports_env.notifications_queue)
    assert len(queued) == 3
    assert queued[0] == queued[1]  # the re-run's summary is the same notification
    for n, body in enumerate(queued):
        send_notification(QueueMessage(id=f"summary-{n}", body=json.dumps(body).encode()))

    assert sorted(e.event_id for e in read_outbox()) == sorted(
        {queued[0]["event_id"], queued[2]["event_id"]}
    )
    assert queued[0]["event_id"] == "import-acme-2026-11-22"
    assert "7 imported" in queued[0]["subject"]
    poison = storage.queue_client(f"{imports_env.notifications_queue}-poison")
    with contextlib.suppress(ResourceNotFoundError):  # never created: nothing was poisoned
        assert poison.peek_messages(max_messages=32) == []
