"""Announce a finished job to its callback once, with the foundation's `@once` record.

The finalizer that won the completion record calls this, and so does the watcher when that
finalizer seems to have died; `@once("job-callback-{job_id}")` lets exactly one of them POST
and gives the others its stored result. A 4xx is a result too (stored, never retried);
`CallbackUnavailable` frees the record so the watcher retries later.

The at-least-once window, honestly: a finalizer that crashes *during* the POST (or after it,
before its @once record is marked completed) leaves the record in progress; once that
record expires (`JobSettings.announce_in_progress_timeout`: the announcement's wall-clock
budget, at most JOB_CALLBACK_DEADLINE, plus 10 s) the next announcement the watcher queues
POSTs again, with the same `Idempotency-Key: {job_id}`. The receiver may thus see the same
job twice, always with the same key, and should deduplicate on it. A live announcer cannot
overlap with that repeat: every attempt is cut at its wall-clock deadline (a receiver that
dribbles bytes included), so it ends before its record expires.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from blobsingleton import Busy, once

from shared import storage, telemetry
from shared.jobs.callback import post_callback
from shared.jobs.config import JobSettings
from shared.jobs.records import Announcement, Completion

#: How long the delivered announcement is remembered (job ids are never reused anyway).
RETENTION = timedelta(days=30)


def _post(job_id: str, completion: Completion, settings: JobSettings) -> dict[str, Any]:
    announcement = post_callback(completion, settings)
    telemetry.job_announced(job_id, str(announcement.state))  # a replay does not come here
    return announcement.to_dict()


def announce(completion: Completion, settings: JobSettings) -> Announcement | None:
    """POST the outcome unless it was announced before (the stored result is returned);
    None when another finalizer is announcing this job right now."""
    announce_once = once(
        "job-callback-{job_id}",
        busy=Busy.SKIP,
        in_progress_timeout=settings.announce_in_progress_timeout,
        retention=RETENTION,
        storage=storage.account(settings.connection),
    )(_post)
    result = announce_once(completion.job_id, completion, settings)
    return None if result is None else Announcement.from_dict(result)
