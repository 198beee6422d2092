"""The last hour's figures for the status page, read from the stores (never from telemetry):
what an operator would chart in Application Insights (docs/telemetry.md), as far as what is
stored can tell it. Each figure names what it is read from; what no store keeps (replays,
deferrals, failures that freed their key) is listed as such, with the metric to look at
instead. Leases lost are read from the instances' notes (`shared.ops_problems`), the charts
from their event tallies (`shared.ops_tally`).

Costs (one call): a listing of the run-once records of this namespace and one read per record
written in the window; a listing of each account's reports and one read per report written in
the window; a listing of the jobs (live and archived) and one read per job that may have
ended in the window; a listing of today's (and, past midnight, yesterday's) audit entries.
The status page asks once a minute.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from azure.core.exceptions import ResourceNotFoundError
from blobsingleton.config import namespace
from blobsingleton.ops import AUDIT_CONTAINER
from blobsingleton.records import BlobRecordStore, Record, Status

from shared import ops_problems, ops_tally, storage
from shared.imports.accounts import InvalidAccount, validate_account
from shared.imports.layout import imports_container
from shared.jobs import Completion, JobSettings, JobStore
from shared.jobs.layout import ARCHIVE_PREFIX
from shared.ops_notes import iso
from shared.settings import setting

WINDOW_S = 3600.0
RECORDS_CONTAINER = ("RUNONCE_CONTAINER", "runonce")


def _epoch(moment: datetime | None) -> float:
    return moment.timestamp() if moment is not None else 0.0


def _figure(section: str, name: str, value: int | None, source: str) -> dict[str, Any]:
    return {"section": section, "figure": name, "value": value, "source": source}


# -- run-once records ------------------------------------------------------------------------


def recent_records(since: float) -> Iterable[tuple[str | None, Record]]:
    """(scope, record) of every run-once record of this namespace written since `since`."""
    name, default = RECORDS_CONTAINER
    container = storage.blob_service().get_container_client(setting(name) or default)
    ns = namespace()
    stores: dict[str | None, BlobRecordStore] = {}
    try:
        listed = list(container.list_blobs(name_starts_with=f"{ns}/"))
    except ResourceNotFoundError:
        return
    for blob in listed:
        if _epoch(blob.last_modified) < since:
            continue
        rest = str(blob.name)[len(ns) + 1 :]
        scope: str | None = None
        if rest.startswith("@"):
            scope, _, rest = rest[1:].partition("/")
        if not rest or "/" in rest:
            continue  # not a record of this layout
        store = stores.get(scope) or stores.setdefault(
            scope, BlobRecordStore(container, namespace=ns, scope=scope)
        )
        record = store.get(unquote(rest))
        if record is not None:
            yield scope, record


Flows = dict[str, tuple[str, str]]
OTHER = ("Runs", "other run-once keys completed")


def run_figures(since: float, flows: Flows) -> list[dict[str, Any]]:
    """Run-once records completed and taken over in the window, per flow (`flows`: a record
    scope -> (section, figure), e.g. the email function's -> ("Emails", "emails sent"))."""
    completed: Counter[tuple[str, str]] = Counter()
    taken_over = 0
    for scope, record in recent_records(since):
        if record.status == Status.COMPLETED:
            completed[flows.get(scope or "", OTHER)] += 1
        if record.attempt > 1 and record.started_at >= since:
            taken_over += 1
    source = "run-once records (RUNONCE_CONTAINER) completed in the last hour"
    figures = [_figure(*flow, completed[flow], source) for flow in (*flows.values(), OTHER)]
    begun = "run-once records begun in the last hour as attempt 2 or later"
    figures.append(_figure("Runs", "crashed runs taken over", taken_over, begun))
    return figures


def audit_figures(since: float, now: float) -> list[dict[str, Any]]:
    """Locks broken and runs reset by operators in the window (the audit log)."""
    name, default = AUDIT_CONTAINER
    container = storage.blob_service().get_container_client(setting(name) or default)
    days = sorted({datetime.fromtimestamp(t, UTC).strftime("%Y/%m/%d/") for t in (since, now)})
    actions: Counter[str] = Counter()
    for day in days:
        try:
            for blob in container.list_blobs(name_starts_with=day):
                if _epoch(blob.last_modified) >= since:
                    entry = json.loads(container.download_blob(blob.name).readall())
                    actions[str(entry.get("action"))] += 1
        except ResourceNotFoundError:
            break
    source = "the operators' audit log (OPS_AUDIT_CONTAINER)"
    return [
        _figure("Locks", "locks broken by an operator", actions["break"], source),
        _figure("Runs", "runs reset by an operator", actions["reset"], source),
    ]


# -- imports ---------------------------------------------------------------------------------


def import_figures(since: float) -> list[dict[str, Any]]:
    """Import runs that finished or continued in the window, their records, and the
    invocations that resumed a run (each run's reports and attempt logs)."""
    container = imports_container()
    ended: Counter[str] = Counter()
    totals: Counter[str] = Counter()
    resumes = 0
    try:
        accounts = [str(p.name)[:-1] for p in container.walk_blobs(delimiter="/")
                    if str(p.name).endswith("/")]  # fmt: skip
    except ResourceNotFoundError:
        accounts = []
    for account in accounts:
        try:
            validate_account(account)
        except InvalidAccount:
            continue
        attempts: dict[str, list[tuple[str, float]]] = {}
        for blob in container.list_blobs(name_starts_with=f"{account}/reports/"):
            name = str(blob.name)
            run = name.split("/")[2]
            if "/attempts/" in name:
                attempts.setdefault(run, []).append((name, _epoch(blob.creation_time)))
            elif name.endswith("/report.json") and _epoch(blob.last_modified) >= since:
                report = json.loads(container.download_blob(name).readall())
                ended[str(report.get("status"))] += 1
                if report.get("status") == "completed":
                    for key in ("records", "imported", "rejected", "files_rejected"):
                        totals[key] += int((report.get("totals") or {}).get(key) or 0)
        for logs in attempts.values():
            first = min(logs)[0]  # attempt blobs are named by token: the first is the lowest
            resumes += sum(1 for name, at in logs if at >= since and name != first)
    reports = "import run reports ({account}/reports/{run}/report.json) written in the last hour"
    completed = "the reports (report.json) of runs completed in the last hour"
    attempts_source = "attempt logs ({account}/reports/{run}/attempts/) begun in the last hour"
    return [
        _figure("Imports", "runs completed", ended["completed"], reports),
        _figure(
            "Imports",
            "invocations that ran out of budget (run continues)",
            ended["continued"],
            reports,
        ),
        _figure("Imports", "records read", totals["records"], completed),
        _figure("Imports", "records imported", totals["imported"], completed),
        _figure("Imports", "records rejected", totals["rejected"], completed),
        _figure("Imports", "files rejected whole", totals["files_rejected"], completed),
        _figure("Imports", "invocations that resumed a run", resumes, attempts_source),
    ]


# -- batch jobs ------------------------------------------------------------------------------


def job_figures(since: float) -> list[dict[str, Any]]:
    """Jobs that ended in the window (their outcome, live or archived), and their callbacks."""
    store = JobStore(JobSettings.from_env())
    outcomes: dict[str, Completion] = {}
    for job_id in store.job_ids():
        completion = store.read_completion(job_id)
        if completion is not None:
            outcomes[job_id] = completion
    settings = store.settings
    container = storage.blob_service(settings.connection).get_container_client(settings.container)
    try:
        archived = list(container.list_blobs(name_starts_with=f"{ARCHIVE_PREFIX}/"))
    except ResourceNotFoundError:
        archived = []
    for blob in archived:
        if _epoch(blob.last_modified) >= since:  # written after the job ended
            data = json.loads(container.download_blob(blob.name).readall())
            completion = Completion.from_dict(data["completion"])
            outcomes.setdefault(completion.job_id, completion)
    ended = [c for c in outcomes.values() if c.completed_at >= since]
    status = Counter(str(c.status) for c in ended)
    callbacks = Counter(str(c.announcement.state) for c in ended if c.announcement)
    failing = sum(1 for c in outcomes.values() if c.announcement is None and c.failed_tries)
    source = "job outcomes (jobs/{job}/completion.json, archive/{job}/job.json)"
    return [
        _figure("Batch jobs", "jobs succeeded", status["succeeded"], source),
        _figure("Batch jobs", "jobs failed", status["failed"], source),
        _figure("Batch jobs", "callbacks delivered", callbacks["delivered"], source),
        _figure(
            "Batch jobs",
            "callbacks refused or abandoned",
            callbacks["refused"] + callbacks["abandoned"],
            source,
        ),
        _figure("Batch jobs", "callbacks failing, retried by the watcher", failing,
                "job outcomes not yet announced with failed tries (jobs/{job}/completion.json)"),
    ]  # fmt: skip


# -- what no store keeps ---------------------------------------------------------------------

NOT_STORED = (
    ("Runs", "duplicates answered from a record (replays)", "blobsingleton.invocations"),
    ("Runs", "runs that failed (their key freed)", "blobsingleton.invocations"),
    ("Emails", "emails deferred (a send of the event in progress)", "app.emails"),
)


def last_hour(flows: Flows, now: float | None = None) -> dict[str, Any]:
    """The figures of the hour before `now` (default: now), each with what it is read from.
    `flows`: run-once record scopes the app names (see `run_figures`)."""
    now = time.time() if now is None else now
    since = now - WINDOW_S
    figures = [
        *run_figures(since, flows),
        *audit_figures(since, now),
        *import_figures(since),
        *job_figures(since),
    ]
    lost = [n for n in ops_problems.newest("lost", 100) if str(n.get("at")) >= str(iso(since))]
    figures.append(_figure("Locks", "leases lost by their holder", len(lost),
                           "lost-lease notes (OPS_NOTES_CONTAINER lost/), newest 100"))  # fmt: skip
    figures += [
        _figure(section, name, None, f"not stored: telemetry only (metric {metric})")
        for section, name, metric in NOT_STORED
    ]
    return {
        "window_s": WINDOW_S,
        "since": datetime.fromtimestamp(since, UTC).isoformat(),
        "until": datetime.fromtimestamp(now, UTC).isoformat(),
        "namespace": namespace(),
        "figures": figures,
        "charts": ops_tally.series(now),
    }
