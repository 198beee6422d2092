"""Batch jobs over HTTP, a unit queue, its poison queue and a watcher timer.

POST /api/jobs          {job_id?, units: [{id, payload}] | units_blob, callback_url}
                        -> 202 (200: repeat); 400 what is wrong; 409 id taken; 413 too large
GET  /api/jobs/{job_id} units done, failed, outstanding; status; announcement (status code)
queue %JOB_UNITS_QUEUE%           one unit: its work (JOB_UNIT_HANDLER), then marker + counter
queue %JOB_UNITS_QUEUE%-poison    a unit that failed every attempt: recorded as failed
queue %JOB_UNITS_QUEUE%-announce  one finished job's callback and archive (queued by a
                                  zero-unit submission and by the watcher)
timer %JOB_WATCH_SCHEDULE%        finds jobs whose finalizer died or whose counter lags

When the last unit is counted the job's callback is POSTed once (see shared.jobs.announce for
the one at-least-once window) and the job is archived. A callback is never POSTed inside an
HTTP request or the watcher's sweep. Settings: shared.jobs.config.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import quote

import azure.functions as func
from blobsingleton import Busy, once
from blobsingleton.errors import InvalidKey
from blobsingleton.timers import Overlap, Timer

from shared import poison
from shared.jobs import (
    AnnounceMessage,
    DefinitionChanged,
    InvalidJob,
    JobExists,
    JobRequest,
    JobSettings,
    JobStore,
    UnitMessage,
    UnitState,
    job_status,
    load_handler,
    process_unit,
    record_unit,
    submit_job,
    watch,
)
from shared.jobs.finalize import finalize_queued
from shared.jobs.layout import validate_id
from shared.jobs.request import MAX_REQUEST_BYTES

log = logging.getLogger(__name__)

UNITS_QUEUE = "%JOB_UNITS_QUEUE%"
POISON_QUEUE = "%JOB_UNITS_QUEUE%-poison"
ANNOUNCE_QUEUE = "%JOB_UNITS_QUEUE%-announce"

bp = func.Blueprint()


def _json(
    status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> func.HttpResponse:
    return func.HttpResponse(
        json.dumps(body), status_code=status, mimetype="application/json", headers=headers
    )


@bp.route(route="jobs", methods=["POST"], auth_level=func.AuthLevel.FUNCTION)
def start_job(req: func.HttpRequest) -> func.HttpResponse:
    """Validate, then record the job and queue its units; 400 says everything wrong at once.
    A body announced larger than the limit is refused before it is read or parsed (413)."""
    settings = JobSettings.from_env()
    declared = _content_length(req)
    if declared is not None and declared > MAX_REQUEST_BYTES:
        message = (
            f"the body is {declared} bytes, the limit is {MAX_REQUEST_BYTES}: submit a larger "
            "job by reference (units_blob, a JSON Lines blob in the definitions container)"
        )
        return _json(413, {"error": "request_too_large", "message": message})
    try:
        request = JobRequest.parse(
            req.get_body(),
            max_units=settings.max_units,
            policy=settings.callback_policy,
            settings=settings,
        )
    except InvalidJob as error:
        problems = [p.to_dict() for p in error.problems]
        return _json(400, {"error": "invalid_job", "message": str(error), "problems": problems})
    try:
        submitted = submit_job(request, JobStore(settings))
    except JobExists as error:
        return _json(409, {"error": "job_exists", "message": str(error), "job_id": error.job_id})
    except DefinitionChanged as error:
        return _json(409, {"error": "definition_changed", "message": str(error)})
    completion = submitted.completion
    status_url = f"/api/jobs/{quote(request.job_id, safe='')}"
    body = {
        "job_id": submitted.job.job_id,
        "status": str(completion.status if completion else submitted.job.status),
        "units": submitted.job.total,
        "status_url": status_url,
    }
    return _json(202 if submitted.created else 200, body, {"Location": status_url})


def _content_length(req: func.HttpRequest) -> int | None:
    raw = req.headers.get("content-length")
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None  # the host refuses a malformed Content-Length before the function runs


@bp.route(route="jobs/{job_id}", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
def get_job(req: func.HttpRequest) -> func.HttpResponse:
    try:
        job_id = validate_id(req.route_params.get("job_id"))
    except InvalidKey as error:
        return _json(400, {"error": "invalid_job_id", "message": error.reason})
    status = job_status(JobStore(), job_id)
    if status is None:
        return _json(404, {"error": "not_found", "message": f"no job {job_id!r}"})
    return _json(200, status)


NOT_A_UNIT = "not a job unit message: "


@bp.queue_trigger(arg_name="msg", queue_name=UNITS_QUEUE, connection="AzureWebJobsStorage")
def run_job_unit(msg: func.QueueMessage) -> None:
    """Do one unit's work and count it; a message this app did not write is poisoned."""
    unit = poison.admit(msg, UNITS_QUEUE, UnitMessage, reason=NOT_A_UNIT)
    if unit is None:
        return
    settings = JobSettings.from_env()
    handler = load_handler(settings.handler)
    process_unit(unit, handler, JobStore(settings), attempt=msg.dequeue_count or 1)


@bp.queue_trigger(arg_name="msg", queue_name=POISON_QUEUE, connection="AzureWebJobsStorage")
def fail_job_unit(msg: func.QueueMessage) -> None:
    """A unit whose every attempt failed: recorded as failed, so its job still finishes."""
    unit = poison.admit(msg, POISON_QUEUE, UnitMessage, reason=NOT_A_UNIT)
    if unit is None:
        return
    reason = "failed every attempt (maxDequeueCount) and was moved to the poison queue"
    record_unit(JobStore(), unit.job_id, unit.unit_id, unit.total, UnitState.FAILED, reason)


@bp.queue_trigger(arg_name="msg", queue_name=ANNOUNCE_QUEUE, connection="AzureWebJobsStorage")
def announce_job(msg: func.QueueMessage) -> None:
    """POST one finished job's callback (once: shared.jobs.announce) and archive it. A receiver
    that is unavailable for now leaves the job to the watcher, which queues it again later."""
    request = poison.admit(msg, ANNOUNCE_QUEUE, AnnounceMessage, reason="not an announce message: ")
    if request is not None:
        finalize_queued(JobStore(), request.job_id)


WATCH_SCHEDULE = "%JOB_WATCH_SCHEDULE%"


@bp.timer_trigger(schedule=WATCH_SCHEDULE, arg_name="timer", run_on_startup=False)
def watch_jobs(timer: func.TimerRequest) -> None:
    """A sweep over the live jobs, one at a time across instances (`sweep`)."""
    sweep(timer)


@once("watch-{occurrence}", schedule=Timer(WATCH_SCHEDULE, overlap=Overlap.skip()),
      retention=3600, busy=Busy.skip())  # fmt: skip
def sweep(timer: func.TimerRequest) -> None:
    """One sweep per occurrence; a sweep due while the last still runs (a slow store, a long
    backlog, instances that do not share a host id) is skipped and recorded as skipped (the
    ledger: GET /api/timers). Overlapping sweeps would be safe, every step being conditional:
    skipping saves their work."""
    found = watch(JobStore())
    if any(state not in ("running", "waiting") for state in found):
        log.info("job watcher: %s", found)
