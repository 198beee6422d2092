"""Accept a job: claim its id, create its counter, queue one message per unit.

The record is written first with If-None-Match (the id is claimed once), status
`accepting`; then the counter, the large payloads and the messages; then status `running`.
A client that retries after a failure (same id, same units and callback) resumes an
`accepting` job and gets the current state of a started or finished one; the same id with
different content is refused. Messages queued twice by such a retry are harmless: each
unit is counted once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from shared import storage
from shared.jobs.errors import JobExists
from shared.jobs.finalize import completion_for, hand_off
from shared.jobs.layout import JobLayout
from shared.jobs.messages import UnitMessage, encode_payload
from shared.jobs.records import Completion, JobRecord, JobStatus, UnitSpec
from shared.jobs.request import JobRequest
from shared.jobs.store import JobStore

ENQUEUE_THREADS = 16
IN_FLIGHT = 4 * ENQUEUE_THREADS


@dataclass(frozen=True)
class Submitted:
    job: JobRecord
    created: bool  # False: this repeats an earlier submission of the same job
    completion: Completion | None = None


def enqueue_units(
    request: JobRequest, store: JobStore, units: Iterable[UnitSpec] | None = None
) -> None:
    """One message per unit (`units`, default all of the request's, in order), ENQUEUE_THREADS
    at a time with at most IN_FLIGHT read ahead: a units blob is streamed, never held whole.
    Payloads too large for a message go to blobs."""
    settings = store.settings
    total = len(request.units)

    def message(unit: UnitSpec) -> bytes:
        msg = UnitMessage(job_id=request.job_id, unit_id=unit.id, total=total, payload=unit.payload)
        if not msg.fits():
            store.put_payload(request.job_id, unit.id, encode_payload(unit.payload))
            msg = UnitMessage(job_id=request.job_id, unit_id=unit.id, total=total, payload_ref=True)
        return msg.to_bytes()

    def send(unit: UnitSpec) -> None:
        storage.send_message(settings.queue, message(unit), connection=settings.connection)

    pending: set[Future[None]] = set()
    with ThreadPoolExecutor(ENQUEUE_THREADS, thread_name_prefix="enqueue") as pool:
        for unit in request.units if units is None else units:
            if len(pending) >= IN_FLIGHT:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    future.result()
            pending.add(pool.submit(send, unit))
        for future in pending:
            future.result()


#: How a job's unit messages are put on the queue (all at once unless a caller paces them).
Enqueuer = Callable[[JobRequest, JobStore], None]


def submit_job(
    request: JobRequest, store: JobStore, *, enqueue: Enqueuer = enqueue_units
) -> Submitted:
    """Start `request`'s job (or return the state of the identical job already started)."""
    record = JobRecord(
        job_id=request.job_id,
        total=len(request.unit_ids),
        unit_ids=request.unit_ids,
        callback_url=request.callback_url,
        created_at=time.time(),
        fingerprint=request.fingerprint(),
    )
    stored, created = store.create_job(record)
    if not created:
        if stored.fingerprint != record.fingerprint:
            raise JobExists(record.job_id, "exists with other units or another callback")
        if stored.status != JobStatus.ACCEPTING:
            return Submitted(stored, False, store.read_completion(record.job_id))
    else:
        archived = store.read_archive(record.job_id)
        if archived is not None:  # ids are never reused: finished jobs stay answerable
            store.delete(JobLayout(record.job_id).record, etag=stored.etag)
            job = JobRecord.from_dict(archived["job"]) if archived.get("job") else None
            if job is None or job.fingerprint != record.fingerprint:
                raise JobExists(record.job_id, "already ran; job ids cannot be reused")
            return Submitted(job, False, Completion.from_dict(archived["completion"]))
    if stored.total == 0:  # nothing to wait for: the outcome now, its callback from the queue
        outcome = completion_for(stored, [], last_unit_at=time.time(), finalized_by="submit")
        done = hand_off(store, outcome)
        return Submitted(stored, True, done)
    store.create_counter(stored.job_id, stored.total)
    enqueue(request, store)
    running = store.replace_job(stored.with_(status=JobStatus.RUNNING))
    return Submitted(running or stored.with_(status=JobStatus.RUNNING), True)
