"""`python -m harness scenario notifications`: one JSON object, counts from the outbox."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from devhost_testkit import HERE

from tests.support import ROOT, child_env


def _scenario(connection_string: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    env = child_env(AzureWebJobsStorage=connection_string)
    env.pop("SENDGRID_API_KEY", None)
    env["AzureFunctionsJobHost__extensions__queues__maxPollingInterval"] = "00:00:00.5"
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "scenario", "notifications", "--instances", "2",
         "--events", "10", "--json", "--timeout", "90", *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, (proc.stdout, proc.stderr[-3000:])
    return proc.returncode, json.loads(lines[0]), proc.stderr


def test_the_app_emails_each_event_once_although_every_instance_sees_it(
    connection_string: str,
) -> None:
    code, report, stderr = _scenario(connection_string)
    assert code == 0, stderr[-3000:]
    assert report["instances"] == 2 and report["events"] == 10
    assert report["deliveries"] == 20
    assert report["invocations"] >= 20  # every instance really saw every event
    assert report["emails_sent"] == 10
    assert (report["duplicates"], report["missing"], report["poisoned"]) == (0, 0, 0)
    assert report["drained"] is True
    assert report["host_storage_requests"] > 0 and report["app_storage_requests"] > 0


def test_duplicates_are_counted_and_fail_the_run(connection_string: str) -> None:
    code, report, stderr = _scenario(
        connection_string, "--app", "devhost_dup_app", "--app-dir", str(HERE), "--backlog", "3"
    )
    assert code == 1
    assert report["emails_sent"] == 20
    assert report["distinct_events_emailed"] == 10
    assert (report["duplicates"], report["missing"]) == (10, 0)
    assert "unrelated" not in stderr  # only the function bound to %NOTIFICATIONS_QUEUE% ran
    assert "fed 14 more messages" in stderr  # 3 events queued up front, 7 fed while running
