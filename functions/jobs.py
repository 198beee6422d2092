"""Batch jobs over HTTP, a unit queue, its poison queue and a watcher timer.

POST /api/jobs          {job_id?, units: [{id, payload}], callback_url} -> 202 (200: repeat)
GET  /api/jobs/{job_id} units done, failed, outstanding; status; announcement
queue %JOB_UNITS_QUEUE%          one unit: its work (JOB_UNIT_HANDLER), then marker + counter
queue %JOB_UNITS_QUEUE%-poison   a unit that failed every attempt: recorded as failed
timer %JOB_WATCH_SCHEDULE%       finishes jobs whose finalizer died or whose counter lags

When the last unit is counted the job's callback is POSTed once (see shared.jobs.announce for
the one at-least-once window) and the job is archived. Settings: shared.jobs.config.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import quote

import azure.functions as func
from blobsingleton.errors import InvalidKey

from shared import poison
from shared.jobs import (
    InvalidJob,
    InvalidUnitMessage,
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
from shared.jobs.layout import validate_id

log = logging.getLogger(__name__)

UNITS_QUEUE = "%JOB_UNITS_QUEUE%"
POISON_QUEUE = "%JOB_UNITS_QUEUE%-poison"

bp = func.Blueprint()


def _json(
    status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> func.HttpResponse:
    return func.HttpResponse(
        json.dumps(body), status_code=status, mimetype="application/json", headers=headers
    )


@bp.route(route="jobs", methods=["POST"], auth_level=func.AuthLevel.FUNCTION)
def start_job(req: func.HttpRequest) -> func.HttpResponse:
    """Validate, then record the job and queue its units; 400 says everything wrong at once."""
    settings = JobSettings.from_env()
    try:
        request = JobRequest.parse(req.get_body(), max_units=settings.max_units)
    except InvalidJob as error:
        problems = [p.to_dict() for p in error.problems]
        return _json(400, {"error": "invalid_job", "message": str(error), "problems": problems})
    try:
        submitted = submit_job(request, JobStore(settings))
    except JobExists as error:
        return _json(409, {"error": "job_exists", "message": str(error), "job_id": error.job_id})
    completion = submitted.completion
    status_url = f"/api/jobs/{quote(request.job_id, safe='')}"
    body = {
        "job_id": submitted.job.job_id,
        "status": str(completion.status if completion else submitted.job.status),
        "units": submitted.job.total,
        "status_url": status_url,
    }
    return _json(202 if submitted.created else 200, body, {"Location": status_url})


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
    unit = poison.admit(msg, UNITS_QUEUE, UnitMessage.parse, InvalidUnitMessage, reason=NOT_A_UNIT)
    if unit is None:
        return
    settings = JobSettings.from_env()
    handler = load_handler(settings.handler)
    process_unit(unit, handler, JobStore(settings), attempt=msg.dequeue_count or 1)


@bp.queue_trigger(arg_name="msg", queue_name=POISON_QUEUE, connection="AzureWebJobsStorage")
def fail_job_unit(msg: func.QueueMessage) -> None:
    """A unit whose every attempt failed: recorded as failed, so its job still finishes."""
    unit = poison.admit(msg, POISON_QUEUE, UnitMessage.parse, InvalidUnitMessage, reason=NOT_A_UNIT)
    if unit is None:
        return
    reason = "failed every attempt (maxDequeueCount) and was moved to the poison queue"
    record_unit(JobStore(), unit.job_id, unit.unit_id, unit.total, UnitState.FAILED, reason)


@bp.timer_trigger(schedule="%JOB_WATCH_SCHEDULE%", arg_name="timer", run_on_startup=False)
def watch_jobs(timer: func.TimerRequest) -> None:
    """A sweep over the live jobs. No lock: the host runs a timer on one instance, and sweeps
    that do overlap (devhost --timers every) are safe, every step being conditional."""
    found = watch(JobStore())
    if any(state not in ("running", "waiting") for state in found):
        log.info("job watcher: %s", found)
