"""What `GET /api/jobs/{id}` answers: progress of a live job, or the outcome of an archived one."""

from __future__ import annotations

from typing import Any

from shared.jobs.records import Completion, JobRecord, UnitState
from shared.jobs.store import JobStore

#: Failed unit ids listed in a status answer (the callback and the archive hold them all).
MAX_LISTED_FAILURES = 100


def job_status(store: JobStore, job_id: str) -> dict[str, Any] | None:
    """The job's status document, or None if there is no such job."""
    job = store.read_job(job_id)
    if job is None:
        archived = store.read_archive(job_id)
        if archived is None:
            return None
        record = JobRecord.from_dict(archived["job"]) if archived.get("job") else None
        return _finished(record, Completion.from_dict(archived["completion"]), archived=True)
    completion = store.read_completion(job_id)
    if completion is not None:
        return _finished(job, completion, archived=False)
    units = set(job.unit_ids)
    markers = [m for m in store.markers(job_id) if m.unit_id in units]
    failed = sorted(m.unit_id for m in markers if m.state == UnitState.FAILED)
    done = len(markers) - len(failed)
    counter = store.counter_state(job_id)
    return {
        "job_id": job.job_id,
        "status": str(job.status),
        "total": job.total,
        "units_done": done,
        "units_failed": len(failed),
        "units_outstanding": job.total - len(markers),
        "failed_units": failed[:MAX_LISTED_FAILURES],
        "counted": counter.value if counter else None,
        "created_at": job.created_at,
        "completed_at": None,
        "announcement": None,
        "archived": False,
    }


def _finished(job: JobRecord | None, completion: Completion, *, archived: bool) -> dict[str, Any]:
    return {
        "job_id": completion.job_id,
        "status": str(completion.status),
        "total": completion.units_done + completion.units_failed,
        "units_done": completion.units_done,
        "units_failed": completion.units_failed,
        "units_outstanding": 0,
        "failed_units": completion.failed_units[:MAX_LISTED_FAILURES],
        "counted": None,
        "created_at": job.created_at if job else None,
        "completed_at": completion.completed_at,
        "announcement": completion.announcement.to_dict() if completion.announcement else None,
        "archived": archived,
    }
