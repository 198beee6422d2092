"""The timer's sweep: move on every job that its own workers could not finish.

Per job under `jobs/`, cheapest check first (one HEAD of the counter for a running job):
- counter moved within JOB_STALL_SECONDS: its workers are at it, nothing to do;
- outcome recorded but not announced for JOB_STALL_SECONDS (its finalizer died before or
  during the callback, or the callback failed for now): queue its announcement;
- outcome announced but not archived: archive it (storage only);
- counter at total but no outcome (the winner died right after counting): record the
  outcome and queue its announcement;
- counter lagging and still (a worker died between marking and counting, and redeliveries
  see the marker): list the markers; when every unit has one, likewise;
- no counter, record or outcome left (stray blobs after an archive): delete them.

The sweep never POSTs a callback: an announcement goes to the announce queue
(`finalize.hand_off`), whose function runs `finalize` for that one job, so a slow or dead
receiver holds one queue invocation (for at most JOB_CALLBACK_DEADLINE seconds), never the
sweep or another job. Jobs are examined SWEEP_THREADS at a time, so a slow storage answer
about one job does not hold the others either.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from shared.jobs.finalize import (
    StepHook,
    archive,
    completion_for,
    completion_from_markers,
    hand_off,
    queue_announcement,
)
from shared.jobs.records import JobStatus
from shared.jobs.store import JobStore

log = logging.getLogger("shared.jobs.watcher")

SWEEP_THREADS = 8


def watch(store: JobStore, *, on_step: StepHook | None = None) -> dict[str, int]:
    """Examine every job once; returns how many ended in each state."""

    def one(job_id: str) -> str:
        try:
            return examine(store, job_id, on_step=on_step)
        except Exception:  # one broken job must not stop the sweep
            log.exception("job %s: the watcher failed to examine it", job_id)
            return "error"

    with ThreadPoolExecutor(SWEEP_THREADS, thread_name_prefix="watch") as pool:
        seen = Counter(pool.map(one, list(store.job_ids())))
    return dict(seen)


def examine(store: JobStore, job_id: str, *, on_step: StepHook | None = None) -> str:
    """Move one job on if it is stuck; returns what was found or done."""
    stall = store.settings.stall_seconds
    now = time.time()
    counter = store.counter_state(job_id)
    if counter is not None and now - counter.modified < stall:
        return "running" if counter.value < counter.total else "finalizing"
    completion = store.read_completion(job_id)
    if completion is not None:
        if completion.announced:
            archive(store, completion, on_step=on_step)
            return "finished"
        if now - completion.completed_at < stall:
            return "finalizing"
        queue_announcement(store, job_id)
        return "announcing"
    job = store.read_job(job_id)
    if job is None:
        if counter is None:
            removed = store.delete_job_blobs(job_id)
            log.info("job %s: removed %d stray blob(s) of a finished job", job_id, removed)
            return "stray-removed"
        return "incomplete"
    if counter is None:
        if job.total == 0 and now - job.created_at >= stall:  # submit died before finalizing
            outcome = completion_for(job, [], last_unit_at=job.created_at, finalized_by="watcher")
        else:
            return str(JobStatus.ACCEPTING)
    elif counter.value >= counter.total:
        log.warning("job %s: counted to the end but not finalized: finalizing", job_id)
        failed = store.failed_units(job_id)
        outcome = completion_for(job, failed, last_unit_at=counter.modified, finalized_by="watcher")
    else:
        marked = completion_from_markers(store, job)
        if marked is None:
            return "waiting"
        outcome = marked
        log.warning(
            "job %s: counter stuck at %d of %d but every unit is marked: finalizing",
            job_id, counter.value, counter.total,
        )  # fmt: skip
    hand_off(store, outcome)
    return "announcing"
