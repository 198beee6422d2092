"""Batch jobs: fan a job's units out on a queue, announce its completion exactly once.

    request = JobRequest.parse(body, max_units=settings.max_units)
    submit_job(request, JobStore())          # record, counter, one queue message per unit
    process_unit(message, handler, store)    # per unit: work, marker, counter (2 requests)
    watch(store)                             # timer: reconcile and finish stuck jobs

See shared.jobs.tracking (counting), shared.jobs.finalize (exactly-once end) and
shared.jobs.announce (the callback and its at-least-once window).
"""

from shared.jobs.config import JobSettings
from shared.jobs.errors import (
    BlockedCallback,
    CallbackUnavailable,
    DefinitionChanged,
    InvalidAnnounceMessage,
    InvalidJob,
    InvalidUnitMessage,
    JobError,
    JobExists,
    PermanentUnitError,
    Problem,
)
from shared.jobs.finalize import finalize
from shared.jobs.handlers import Unit, UnitHandler, load_handler
from shared.jobs.messages import AnnounceMessage, UnitMessage
from shared.jobs.records import Completion, JobRecord, JobStatus, UnitState
from shared.jobs.request import JobRequest
from shared.jobs.status import job_status
from shared.jobs.store import JobStore
from shared.jobs.submit import Submitted, submit_job
from shared.jobs.tracking import Recorded, UnitRecorded, record_unit
from shared.jobs.watcher import watch
from shared.jobs.worker import process_unit

__all__ = [
    "AnnounceMessage",
    "BlockedCallback",
    "CallbackUnavailable",
    "Completion",
    "DefinitionChanged",
    "InvalidAnnounceMessage",
    "InvalidJob",
    "InvalidUnitMessage",
    "JobError",
    "JobExists",
    "JobRecord",
    "JobRequest",
    "JobSettings",
    "JobStatus",
    "JobStore",
    "PermanentUnitError",
    "Problem",
    "Recorded",
    "Submitted",
    "Unit",
    "UnitHandler",
    "UnitMessage",
    "UnitRecorded",
    "UnitState",
    "finalize",
    "job_status",
    "load_handler",
    "process_unit",
    "record_unit",
    "submit_job",
    "watch",
]
