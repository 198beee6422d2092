"""Count a finished unit in two storage requests, so the last one finalizes the job.

1. Create the unit's marker with If-None-Match: *. It exists already: a duplicate delivery,
   nothing more to do (idempotent).
2. Only the delivery that created the marker increments the job's counter, the sequence
   number of an empty page blob, incremented atomically by the service in one request with
   no ETag retries: eight workers finishing units in the same millisecond never wait for
   each other, and exactly one of them gets back n == total. That one finalizes.

A failed unit writes one more blob (its entry in `failed/`) between the two, so the
finalizer lists the failures instead of every unit. A worker that dies between 1 and 2
leaves the counter one short for good (the redelivery sees the marker): the watcher
reconciles such a job from its markers (shared.jobs.watcher).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from enum import StrEnum

from shared.jobs.finalize import StepHook, completion_for, finalize, step
from shared.jobs.records import Completion, UnitState
from shared.jobs.store import JobStore

log = logging.getLogger("shared.jobs.tracking")


class Recorded(StrEnum):
    COUNTED = "counted"  # this delivery counted the unit
    DUPLICATE = "duplicate"  # an earlier delivery did
    JOB_GONE = "job-gone"  # the job finished and was archived (or never existed)


@dataclass(frozen=True)
class UnitRecorded:
    outcome: Recorded
    count: int | None = None
    completion: Completion | None = None


def record_unit(
    store: JobStore,
    job_id: str,
    unit_id: str,
    total: int,
    state: UnitState = UnitState.DONE,
    reason: str | None = None,
    *,
    on_step: StepHook | None = None,
) -> UnitRecorded:
    """Mark the unit finished (`state`) and count it; finalize if it was the last."""
    if not store.mark(job_id, unit_id, state, reason):
        log.info("job %s unit %s: already recorded (duplicate delivery)", job_id, unit_id)
        return UnitRecorded(Recorded.DUPLICATE)
    step(on_step, "marked")
    if state == UnitState.FAILED:
        store.index_failed(job_id, unit_id, reason)
    count = store.increment(job_id)
    if count is None:
        store.unmark(job_id, unit_id)  # keep no stray marker under a finished job
        if state == UnitState.FAILED:
            store.unindex_failed(job_id, unit_id)
        log.warning("job %s unit %s: the job is finished or unknown; ignored", job_id, unit_id)
        return UnitRecorded(Recorded.JOB_GONE)
    step(on_step, "counted")
    if count < total:
        return UnitRecorded(Recorded.COUNTED, count)
    if count > total:
        log.warning("job %s: counter at %d of %d (late duplicate?)", job_id, count, total)
        return UnitRecorded(Recorded.COUNTED, count)
    return UnitRecorded(Recorded.COUNTED, count, finalize_counted(store, job_id, on_step=on_step))


def finalize_counted(
    store: JobStore, job_id: str, *, on_step: StepHook | None = None
) -> Completion | None:
    """Finalize as the holder of n == total: every unit has a marker, so the failures are
    exactly the `failed/` entries (one list request) and this unit was the last one."""
    last_unit_at = time.time()
    job = store.read_job(job_id)
    if job is None:
        log.warning("job %s: record gone when its last unit was counted", job_id)
        return None
    failed = store.failed_units(job_id) if job.total else []
    completion = completion_for(job, failed, last_unit_at=last_unit_at, finalized_by="counter")
    return finalize(store, completion, job=job, on_step=on_step)
