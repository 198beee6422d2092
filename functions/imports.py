"""Nightly per-account eligibility imports: a fan-out timer, a per-account worker, a manual run.

    nightly_import   timer %IMPORT_SCHEDULE%, fires on every instance; @once per occurrence
                     enqueues one message per account on %IMPORT_QUEUE%
    import_account   queue %IMPORT_QUEUE%: @singleton("import-{account}") so one account
                     imports one at a time while accounts run in parallel; @once per run
    POST /api/imports/{account}/run
                     202 + run id (a manual run queued), 409 while that account imports,
                     400 for an invalid account name
    POST /api/imports/nightly  ?occurrence=
                     the nightly fan-out fired by an external scheduler: the same occurrence
                     as the timer's (one run between them); late within a day a catch-up,
                     later 409 with the reason (blobsingleton.timers)
    import_arrival   blob trigger on %IMPORTS_CONTAINER% with the Event Grid source (what Flex
                     Consumption runs): a file written to {account}/incoming/ queues a run of
                     that account, once per file version (its name and ETag: @once); the run
                     is `import_account`'s, under the same lease as the nightly and manual runs

A crashed instance never blocks the next night: its lease expires within 15 s, and the
next delivery takes its in-progress record over (see `import_under_lease`) and resumes the
run from its checkpoint. A run longer than one invocation's budget
(IMPORT_INVOCATION_BUDGET_S) hands itself on: the invocation frees the run-once record,
releases the lease and re-enqueues the same request (same run id), whose delivery carries
on from the checkpoint; the run-once record completes once, when the run does.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import azure.functions as func
from azure.functions.timer import TimerRequest as WorkerTimerRequest
from blobsingleton import Busy, current_lease, once, schedules, singleton, timers
from blobsingleton.timers import CatchUp, Timer

from shared import poison
from shared.imports import config, db_config
from shared.imports.accounts import InvalidAccount, validate_account
from shared.imports.arrivals import NotAnArrival, arrival_of, current_etag, version_of
from shared.imports.fanout import (
    QUEUE,
    SCHEDULE,
    accounts_to_import,
    enqueue_imports,
    enqueue_request,
)
from shared.imports.importer import run_import
from shared.imports.keys import ARRIVAL_KEY, LEASE_KEY, NIGHTLY_KEY, REQUEST_LEASE_KEY, RUN_KEY
from shared.imports.layout import Layout, container_name
from shared.imports.request import ImportRequest
from shared.settings import resolve_placeholders

log = logging.getLogger(__name__)

#: The import's settings, checked when the app is indexed: a bad value (a cap that is not a
#: number, a key of the wrong length) fails the start-up with the setting's name, instead of
#: every night's run. Each run reads them again (`config.ImportSettings.from_env`).
SETTINGS = config.check()
#: Each account's database source, checked the same way (URL, table, key, column mapping:
#: `db_config.py`); its columns are checked against the table when a run connects.
DATABASE_SOURCES = db_config.check()

bp = func.Blueprint()


@bp.timer_trigger(schedule=SCHEDULE, arg_name="timer", use_monitor=True)
def nightly_import(timer: func.TimerRequest) -> None:
    """Fan out one import message per account; every instance fires, one fan-out happens.

    Returns None: a function without a `$return` binding that returns a value fails in the
    Python worker ("without a $return binding returned a non-None value"), so the fan-out's
    summary is kept by `@once` on `fan_out_night`, not returned to the host.
    """
    fan_out_night(timer)


#: The nightly timer: a night missed (the app down, the host not firing) is caught up once, the
#: latest within a day, by the next firing or the external scheduler's call; older ones are
#: recorded missed (the ledger: GET /api/timers).
NIGHTLY = Timer(SCHEDULE, catch_up=CatchUp.latest(within=timedelta(days=1)))


@once(NIGHTLY_KEY, schedule=NIGHTLY, in_progress_timeout=60, busy=Busy.wait(timeout=90))
def fan_out_night(timer: func.TimerRequest) -> dict[str, Any]:
    """Enqueue one message per account, once per schedule occurrence; the summary is stored.

    The run-once key is the schedule occurrence, not the instance's clock, so instances
    firing seconds apart (or a past-due catch-up) agree on it. The others wait (a fan-out
    takes seconds) rather than skip: if the fanning instance dies, its record expires after
    60 s and a waiting instance, or the host's past-due catch-up after a restart, takes
    over. A duplicate fan-out would be harmless anyway: each account's run is run-once.
    """
    # The worker binds its own TimerRequest, which carries the schedule status the abstract
    # `func.TimerRequest` does not declare.
    status = cast(WorkerTimerRequest, timer).schedule_status
    occurrence = schedules.fired_occurrence(resolve_placeholders(SCHEDULE), status)
    accounts, skipped = accounts_to_import()
    requests = enqueue_imports(accounts, occurrence.date())
    log.info(
        "nightly import for %s: %d account(s) enqueued, %d folder(s) skipped (invalid name)%s",
        occurrence.date().isoformat(), len(requests), skipped,
        " [past due]" if timer.past_due else "",
    )  # fmt: skip
    return {
        "occurrence": occurrence.isoformat(),
        "run_date": occurrence.date().isoformat(),
        "accounts": [r.account for r in requests],
        "skipped_folders": skipped,
    }


class RunContinues(Exception):
    """The run's invocation budget is spent; its checkpoint says where it carries on."""

    def __init__(self, summary: dict[str, Any]) -> None:
        super().__init__(f"import {summary.get('account')}/{summary.get('run_id')} continues")
        self.summary = summary


@bp.queue_trigger(arg_name="msg", queue_name=QUEUE, connection="AzureWebJobsStorage")
def import_account(msg: func.QueueMessage) -> None:
    """Parse the request, then import under the account's lease; poison what can never run.

    A run that continues is re-enqueued here, after the lease and the run-once record were
    given back (so the continuation's delivery can take both at once). Should this instance
    die before the enqueue, the message in hand is delivered again and resumes the run."""
    request = poison.admit(msg, QUEUE, ImportRequest)
    if request is None:
        return
    try:
        import_under_lease(request, msg)
    except RunContinues:
        enqueue_request(request)
        log.info("import %s/%s: continuation queued", request.account, request.run_id)


@singleton(REQUEST_LEASE_KEY, scope="app", busy=Busy.defer(queue=QUEUE))
@once(RUN_KEY, busy=Busy.defer(queue=QUEUE))
def import_under_lease(request: ImportRequest, msg: func.QueueMessage) -> dict[str, Any]:
    """One run of one account, under its lease, at most one completed run per run id.

    The keys come from the validated `request`; a deferral re-enqueues `msg`, the trigger.
    The lease is the app's (`scope="app"`): the HTTP trigger takes the same one.
    Under the lease (`@once` knows it from the `@singleton` above): whoever gets here holds
    the account's lease, so a run still in progress
    is one that lost it (crashed, or paused past its lease and fenced off by the token) and is
    taken over at once; a completed run is returned as it is.
    """
    report = run_import(request, current_lease().token)
    if report.status == "continued":
        raise RunContinues(report.summary())  # frees the record: the run is not done yet
    return report.summary()


def _json(status: int, body: dict[str, Any]) -> func.HttpResponse:
    return func.HttpResponse(
        json.dumps(body), status_code=status, mimetype="application/json", charset="utf-8"
    )


def _busy(error: Exception) -> func.HttpResponse:
    key = str(getattr(error, "key", ""))
    return _json(409, {
        "error": "busy",
        "account": key.removeprefix("import-") or None,
        "detail": "an import of this account is running; try again once it has finished",
    })  # fmt: skip


@bp.route(route="imports/{account}/run", methods=["POST"], auth_level=func.AuthLevel.FUNCTION)
def run_import_now(req: func.HttpRequest) -> func.HttpResponse:
    """Start a manual import of one account: 202 with the run id, 409 if busy, 400 if invalid."""
    try:
        validate_account(req.route_params.get("account"))
    except InvalidAccount as error:
        return _json(400, {"error": "invalid_account", "detail": error.reason})
    return _queue_manual_run(req)


@singleton(LEASE_KEY, scope="app", busy=_busy)
def _queue_manual_run(req: func.HttpRequest) -> func.HttpResponse:
    """Queue the run while holding the account's lease for an instant.

    Why queue instead of importing inside the request: an import can take minutes (HTTP
    requests are cut at 230 s on Azure), and the queue worker's own `@singleton` is the one
    guard that matters, so both paths share one lock and one code path. Taking the same lease
    here makes the 409 truthful: it is returned exactly while a run of this account holds the
    lease. A 202 means "queued"; should a run start in between, the queued one waits its turn
    (deferred), never overlaps.
    """
    account = req.route_params["account"]
    request = ImportRequest.manual(account, datetime.now(UTC).date())
    enqueue_request(request)
    log.info("manual import %s/%s queued", account, request.run_id)
    return _json(202, {
        "account": account,
        "run_id": request.run_id,
        "status": "queued",
        "report": Layout(account, request.run_id).report,
    })  # fmt: skip


@bp.route(route="imports/nightly", methods=["POST"], auth_level=func.AuthLevel.FUNCTION)
def run_nightly_now(req: func.HttpRequest) -> func.HttpResponse:
    """The nightly fan-out fired by an external scheduler (?occurrence=ISO time, default the
    latest due): one ledger with the timer, so whichever comes first runs the occurrence and
    the other gets its stored summary; 409 with the reason outside the catch-up window."""
    text = req.params.get("occurrence")
    try:
        occurrence = datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None
    except ValueError:
        return _json(400, {"error": "invalid_occurrence", "detail": "an ISO 8601 time"})
    try:
        summary = timers.fire(fan_out_night, occurrence)
    except timers.OccurrenceRefused as error:
        return _json(409, {"error": "occurrence_refused", "detail": error.reason})
    if summary is None:  # its ledger entry says it was passed over (a fan-out returns a summary)
        detail = "this occurrence is recorded missed or skipped (GET /api/timers)"
        return _json(409, {"error": "occurrence_refused", "detail": detail})
    return _json(200, summary)


#: Every blob of the imports container: an Event Grid subscription filters by prefix (and
#: suffix), never by a segment in the middle such as `incoming`, so the function sorts them.
ARRIVALS = "%IMPORTS_CONTAINER%/{name}"


@bp.blob_trigger(arg_name="blob", path=ARRIVALS, connection="AzureWebJobsStorage",
                 source=func.BlobSource.EVENT_GRID)  # fmt: skip
def import_arrival(blob: func.InputStream) -> None:
    """A file dropped into `{account}/incoming/` queues a run of that account, once per version.

    The event is delivered at least once (Event Grid retries, the host's queue retries up to 5
    times): the version (blob name and ETag, read now) is the run-once key, so a repeat
    starts nothing and an overwrite (a new ETag) starts a run again. The run is queued, as the
    HTTP trigger queues one, so `import_account`'s lease serializes it with the nightly and
    manual runs of that account (deferred while one runs), and a long run hands itself on
    across invocations as theirs do. It imports what `incoming/` holds then, in name order:
    this file, and any other waiting. A blob outside `incoming/` starts nothing; a file name
    the nightly run would refuse starts nothing either (each night's report lists it).
    """
    try:
        arrival = arrival_of(blob.name or "", container_name())
    except NotAnArrival as error:
        if error.refused:
            log.warning("import arrival: an incoming file refused, no run started: %s",
                        error.reason)  # fmt: skip
        else:
            log.debug("import arrival: %s: nothing to start", error.reason)
        return
    etag = current_etag(arrival)
    if etag is None:
        log.info("import arrival for %s: the file has left incoming/ already (imported by a "
                 "run in between): nothing to start", arrival.account)  # fmt: skip
        return
    started = start_arrival_run(arrival.account, version_of(arrival, etag)) or {}
    log.info("import arrival for %s: run %s", arrival.account, started.get("run_id"))


@once(ARRIVAL_KEY, busy=Busy.wait(timeout=30))
def start_arrival_run(account: str, version: str) -> dict[str, Any]:
    """Queue the run of one file version's arrival, once: a duplicate delivery gets this
    stored summary back. Should the enqueue fail, the record is freed and the host's retry
    of the event queues it; should the instance die after it, the run id (from the version)
    is the same, and the run's own run-once record lets it run once."""
    request = ImportRequest.arrival(account, datetime.now(UTC).date(), version)
    enqueue_request(request)
    return {"account": account, "run_id": request.run_id}
