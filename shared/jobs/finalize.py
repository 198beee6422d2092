"""Finish a job exactly once: record the outcome, announce it, archive the job.

    create completion.json (If-None-Match: *)   only one outcome is ever stored
    announce (POST, under @once per job)         see shared.jobs.announce for the window
    record the announcement in completion.json   (If-Match)
    archive: archive/{job}/job.json, then delete the job's blobs, job.json and
             completion.json last, so an interrupted archive is found and resumed

Every step is idempotent, so the counter's winner and the announce queue's function can both
run `finalize` for the same job, at the same time or after a crash of the other, and it still
ends once. The counter's winner runs it in its own queue invocation; a zero-unit submission
(an HTTP request) and the watcher (a sweep over every job) never POST: they record the
outcome and `hand_off` the rest to the announce queue, one message per job.
`on_step` is called after each durable step with its name: an observation point (tests kill
the process there); production passes nothing.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable

from shared import storage, telemetry
from shared.jobs.announce import announce
from shared.jobs.errors import CallbackUnavailable
from shared.jobs.layout import JobLayout
from shared.jobs.messages import AnnounceMessage
from shared.jobs.records import (
    Announcement,
    AnnouncementState,
    Completion,
    FailedTries,
    JobRecord,
    JobStatus,
    UnitState,
)
from shared.jobs.store import JobStore

log = logging.getLogger("shared.jobs.finalize")

StepHook = Callable[[str], None]
MAX_RACES = 5


def step(on_step: StepHook | None, name: str) -> None:
    if on_step is not None:
        on_step(name)


def completion_for(
    job: JobRecord, failed: list[str], *, last_unit_at: float, finalized_by: str
) -> Completion:
    """The outcome of `job` whose units all finished, `failed` among them."""
    known = set(job.unit_ids)
    failed = sorted(u for u in set(failed) if u in known)
    return Completion(
        job_id=job.job_id,
        status=JobStatus.FAILED if failed else JobStatus.SUCCEEDED,
        units_done=job.total - len(failed),
        units_failed=len(failed),
        failed_units=failed,
        callback_url=job.callback_url,
        completed_at=time.time(),
        last_unit_at=last_unit_at,
        finalized_by=finalized_by,
    )


def completion_from_markers(store: JobStore, job: JobRecord) -> Completion | None:
    """The outcome read from the unit markers; None while some unit has none (one list
    request per 5000 units: the watcher's reconciliation when the counter lags)."""
    markers = {m.unit_id: m for m in store.markers(job.job_id)}
    if any(unit_id not in markers for unit_id in job.unit_ids):
        return None
    failed = [m.unit_id for m in markers.values() if m.state == UnitState.FAILED]
    last = max((m.at for m in markers.values()), default=job.created_at)
    return completion_for(job, failed, last_unit_at=last, finalized_by="watcher")


def finalize(
    store: JobStore,
    completion: Completion,
    *,
    job: JobRecord | None = None,
    on_step: StepHook | None = None,
) -> Completion | None:
    """Drive the finished job to its end. Returns the final completion, or None when the
    announcement is in progress elsewhere or failed for now (the watcher comes back)."""
    stored, created = store.create_completion(completion)
    if stored is None:  # another finalizer archived the job meanwhile
        log.info("job %s: already finished and archived", completion.job_id)
        archived = store.read_archive(completion.job_id)
        return Completion.from_dict(archived["completion"]) if archived else None
    completion = stored
    if created:
        telemetry.job_completed(completion)
        log.info(
            "job %s finished %s (%d done, %d failed); finalized by %s",
            completion.job_id, completion.status, completion.units_done,
            completion.units_failed, completion.finalized_by,
        )  # fmt: skip
    step(on_step, "completion-recorded")
    if not completion.announced:
        announced = _announce(store, completion, on_step)
        if announced is None:
            return None
        completion = announced
    archive(store, completion, job=job, on_step=on_step)
    return completion


def hand_off(store: JobStore, completion: Completion) -> Completion | None:
    """Record the outcome (if none is yet) and queue its announcement: the announce queue's
    function runs `finalize` for it. Returns the stored outcome (None: already archived)."""
    stored, created = store.create_completion(completion)
    if stored is None:
        return None
    if created:
        telemetry.job_completed(stored)
        log.info(
            "job %s finished %s (%d done, %d failed); recorded by %s",
            stored.job_id, stored.status, stored.units_done, stored.units_failed,
            stored.finalized_by,
        )  # fmt: skip
    queue_announcement(store, stored.job_id)
    return stored


def finalize_queued(
    store: JobStore, job_id: str, *, on_step: StepHook | None = None
) -> Completion | None:
    """The announce queue's work for one job: `finalize` its recorded outcome. None when
    there is none (archived meanwhile) or the announcement is for later."""
    completion = store.read_completion(job_id)
    if completion is None:
        log.info("job %s: nothing to announce (no outcome: archived already)", job_id)
        return None
    return finalize(store, completion, on_step=on_step)


def queue_announcement(store: JobStore, job_id: str) -> None:
    """One message on the announce queue: its function announces and archives the job."""
    settings = store.settings
    message = AnnounceMessage(job_id=job_id).to_bytes()
    storage.send_message(settings.announce_queue, message, connection=settings.connection)


def _announce(
    store: JobStore, completion: Completion, on_step: StepHook | None
) -> Completion | None:
    settings = store.settings
    age = time.time() - completion.completed_at
    if age > settings.give_up_seconds:
        reason = f"callback still unavailable {age / 3600:.1f} h after the job finished"
        log.error("job %s: %s: giving up", completion.job_id, reason)
        abandoned = Announcement(AnnouncementState.ABANDONED, 0, time.time(), None, reason)
        telemetry.job_announced(completion.job_id, str(abandoned.state))
        return record_announcement(store, completion, abandoned)
    try:
        announcement = announce(completion, settings)
    except CallbackUnavailable as error:
        log.warning("job %s: %s; the watcher retries later", completion.job_id, error)
        note_failed_tries(store, completion, error)
        return None
    if announcement is None:
        log.info("job %s: being announced elsewhere", completion.job_id)
        return None
    step(on_step, "announced")
    if announcement.state != AnnouncementState.DELIVERED:
        log.error(
            "job %s: callback refused (%s): %s",
            completion.job_id, announcement.http_status, announcement.reason,
        )  # fmt: skip
    recorded = record_announcement(store, completion, announcement)
    step(on_step, "announcement-recorded")
    return recorded


def note_failed_tries(store: JobStore, completion: Completion, error: CallbackUnavailable) -> None:
    """Add the failed attempts to the outcome (If-Match; a lost race only loses the note) so
    the operators' views show a failing callback, not a finished job."""
    status = re.match(r"HTTP (\d{3})", error.reason)
    before = completion.failed_tries.tries if completion.failed_tries else 0
    tries = FailedTries(before + error.attempts, time.time(), error.reason,
                        int(status.group(1)) if status else None)  # fmt: skip
    if store.replace_completion(completion.with_(failed_tries=tries)) is None:
        log.info("job %s: its outcome changed meanwhile: failed tries not noted", completion.job_id)


def record_announcement(
    store: JobStore, completion: Completion, announcement: Announcement
) -> Completion:
    """Store how the announcement went in completion.json (If-Match, re-read on a race)."""
    current = completion
    for _ in range(MAX_RACES):
        if current.announced:
            return current
        updated = store.replace_completion(current.with_(announcement=announcement))
        if updated is not None:
            return updated
        reread = store.read_completion(completion.job_id)
        if reread is None:  # archived meanwhile by another finalizer
            return current.with_(announcement=announcement)
        current = reread
    raise RuntimeError(f"job {completion.job_id}: lost {MAX_RACES} races recording its callback")


def archive(
    store: JobStore,
    completion: Completion,
    *,
    job: JobRecord | None = None,
    on_step: StepHook | None = None,
) -> None:
    """Keep the record and outcome under archive/, then delete the live blobs (idempotent)."""
    layout = JobLayout(completion.job_id)
    job = job or store.read_job(completion.job_id)
    if job is not None:  # else an earlier archive wrote it before deleting job.json
        store.write_archive(job.with_(status=completion.status), completion)
    step(on_step, "archive-written")
    last = frozenset({layout.record, layout.completion})
    deleted = store.delete_job_blobs(layout.job_id, keep=last)
    store.delete(layout.record)
    store.delete(layout.completion)
    log.info("job %s archived (%d blobs deleted)", layout.job_id, deleted + 2)
    step(on_step, "archived")
