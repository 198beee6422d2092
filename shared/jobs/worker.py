"""One unit message, start to end: fetch its payload, do its work, record it finished."""

from __future__ import annotations

import json
import logging

from shared.jobs.errors import PermanentUnitError
from shared.jobs.finalize import StepHook, step
from shared.jobs.handlers import Unit, UnitHandler
from shared.jobs.messages import UnitMessage
from shared.jobs.records import UnitState
from shared.jobs.store import JobStore
from shared.jobs.tracking import Recorded, UnitRecorded, record_unit

log = logging.getLogger("shared.jobs.worker")


def process_unit(
    message: UnitMessage,
    handler: UnitHandler,
    store: JobStore,
    *,
    attempt: int = 1,
    on_step: StepHook | None = None,
) -> UnitRecorded:
    """Run `handler` on the unit and record the result. Exceptions other than
    `PermanentUnitError` propagate: the host retries the message, then poisons it."""
    payload = message.payload
    if message.payload_ref:
        raw = store.get_payload(message.job_id, message.unit_id)
        if raw is None:
            if store.counter_state(message.job_id) is None:
                log.warning("job %s is finished or unknown: unit %s ignored",
                            message.job_id, message.unit_id)  # fmt: skip
                return UnitRecorded(Recorded.JOB_GONE)
            return _record(store, message, UnitState.FAILED, "payload blob is missing", on_step)
        payload = json.loads(raw)
    unit = Unit(message.job_id, message.unit_id, payload, attempt)
    try:
        handler(unit)
    except PermanentUnitError as error:
        step(on_step, "worked")
        return _record(store, message, UnitState.FAILED, str(error) or "failed", on_step)
    step(on_step, "worked")
    return _record(store, message, UnitState.DONE, None, on_step)


def _record(
    store: JobStore,
    message: UnitMessage,
    state: UnitState,
    reason: str | None,
    on_step: StepHook | None,
) -> UnitRecorded:
    return record_unit(
        store, message.job_id, message.unit_id, message.total, state, reason, on_step=on_step
    )
