"""What `GET /api/jobs/{id}` answers: progress of a live job, or the outcome of an archived one."""

from __future__ import annotations

import re
from dataclasses import asdict
from typing import Any

from shared.jobs.records import Announcement, Completion, JobRecord, UnitState
from shared.jobs.store import JobStore

#: Failed unit ids listed in a status answer (the callback and the archive hold them all).
MAX_LISTED_FAILURES = 100
#: An HTTP refusal as recorded: its status only. Announcements recorded before the callback
#: stopped reading answers carry up to 300 characters of the receiver's body after it.
_HTTP_REASON = re.compile(r"HTTP \d{3}(?: \(redirects are not followed\))?")


def announcement_view(announcement: Announcement | None) -> dict[str, Any] | None:
    """How the callback went, as answered: state, attempts, time, HTTP status and a reason
    that never holds what the receiver said."""
    if announcement is None:
        return None
    view = announcement.to_dict()
    reason = announcement.reason or ""
    if reason.startswith("HTTP "):
        kept = _HTTP_REASON.match(reason)
        view["reason"] = kept.group(0) if kept else None
    return view


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
        "announcement": announcement_view(completion.announcement),
        "failed_tries": asdict(completion.failed_tries) if completion.failed_tries else None,
        "archived": archived,
    }
