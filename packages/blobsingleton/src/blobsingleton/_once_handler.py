"""The run-once state machine for one key, independent of how the work is called.

    begin() ──► EXECUTE ──(work)──► complete(result)   record: in_progress → completed
       │                   └─(raises)──► fail()         record deleted: the next delivery retries
       ├──► STORED       completed before: return its stored result
       ├──► BUSY         in progress elsewhere and not expired
       └──► ABANDONED    in progress elsewhere, expired, and mode is at-most-once: never rerun

An expired in-progress record means the earlier run crashed; in at-least-once mode it is
taken over (the crash window is `in_progress_timeout`). Every write is conditional, so two
deliveries racing on the same key cannot both EXECUTE.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from blobsingleton._events import emit
from blobsingleton._keys import validate_key
from blobsingleton._owner import instance_id
from blobsingleton._records import Record, RecordStore, Status
from blobsingleton.errors import AlreadyInProgress, PayloadMismatch, RecordConflict

log = logging.getLogger("blobsingleton")

#: Attempts at winning a conditional write before giving up (each loss means real progress
#: by someone else, so a handful is plenty).
MAX_RACES = 5


class Mode(StrEnum):
    AT_LEAST_ONCE = "at_least_once"  # a crashed run is retried once its record expires
    AT_MOST_ONCE = "at_most_once"  # a crashed run is never retried


class Decision(StrEnum):
    EXECUTE = "execute"
    STORED = "stored"
    BUSY = "busy"
    ABANDONED = "abandoned"


@dataclass(frozen=True)
class Outcome:
    decision: Decision
    record: Record


def payload_hash(payload: Any) -> str:
    """A stable hash of a JSON-able payload (bytes and str are hashed as they are)."""
    if isinstance(payload, bytes):
        raw = payload
    elif isinstance(payload, str):
        raw = payload.encode()
    else:
        raw = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(raw).hexdigest()


class OnceHandler:
    """Drives one key through the states above against a `RecordStore`."""

    def __init__(
        self,
        store: RecordStore,
        key: str,
        *,
        payload: str | None = None,
        mode: Mode = Mode.AT_LEAST_ONCE,
        in_progress_timeout: float = 300.0,
        retention: float = 7 * 24 * 3600.0,
    ) -> None:
        self.store = store
        self.key = validate_key(key)
        self.payload = payload
        self.mode = mode
        self.in_progress_timeout = in_progress_timeout
        self.retention = retention
        self._claimed: Record | None = None

    def begin(self) -> Outcome:
        """Decide what this delivery does; on EXECUTE the key is claimed for us."""
        record = self.store.get(self.key)
        for _ in range(MAX_RACES):
            try:
                return self._decide(record, time.time())
            except RecordConflict:
                record = self.store.get(self.key)
        raise RecordConflict(f"run-once key {self.key!r}: lost {MAX_RACES} races in a row")

    def wait(self, timeout: float, poll_interval: float = 1.0) -> Outcome:
        """`begin`, polling while another delivery is in progress, up to `timeout` seconds."""
        deadline = time.monotonic() + timeout
        outcome = self.begin()
        while outcome.decision == Decision.BUSY and time.monotonic() < deadline:
            time.sleep(min(poll_interval, max(0.0, deadline - time.monotonic())))
            outcome = self.begin()
        return outcome

    def complete(self, result: Any) -> None:
        """Record the result; later duplicates get it back without running."""
        claimed = self._take_claim()
        done = claimed.with_(
            status=Status.COMPLETED,
            result=_jsonable(result),
            expires_at=time.time() + self.retention,
        )
        try:
            self.store.replace(done, claimed.etag or "")
            emit("completed", key=self.key, duration_s=time.time() - done.started_at)
        except RecordConflict:
            log.warning(
                "run-once %s finished after its in-progress record expired and was taken "
                "over: this run and the takeover may both have had effects",
                self.key,
            )

    def fail(self) -> None:
        """Free the key so the next delivery runs the work again."""
        claimed = self._take_claim()
        try:
            self.store.delete(self.key, claimed.etag or "")
        except RecordConflict:
            log.warning("run-once %s: record changed before it could be freed", self.key)

    # -- the transitions -------------------------------------------------------------------------
    def _decide(self, record: Record | None, now: float) -> Outcome:
        if record is None:
            return self._claim(self.store.put_if_absent(self._in_progress(now, attempt=1)))
        self._check_payload(record)
        if record.status == Status.COMPLETED:
            if not record.expired(now):
                return Outcome(Decision.STORED, record)
            fresh = self._in_progress(now, attempt=1)  # retention over: a new run
            return self._claim(self.store.replace(fresh, record.etag or ""))
        if not record.expired(now):
            return Outcome(Decision.BUSY, record)
        if self.mode == Mode.AT_MOST_ONCE:
            log.warning(
                "run-once %s: earlier run did not finish; at-most-once, not rerun", self.key
            )
            return Outcome(Decision.ABANDONED, record)
        log.warning(
            "run-once %s: earlier run (attempt %d, %s) expired; taking over",
            self.key,
            record.attempt,
            record.owner,
        )
        emit("takeover", key=self.key, attempt=record.attempt + 1, previous_owner=record.owner)
        takeover = self._in_progress(now, attempt=record.attempt + 1)
        return self._claim(self.store.replace(takeover, record.etag or ""))

    def _in_progress(self, now: float, attempt: int) -> Record:
        return Record(
            key=self.key,
            status=Status.IN_PROGRESS,
            started_at=now,
            expires_at=now + self.in_progress_timeout,
            payload_hash=self.payload,
            owner=instance_id(),
            attempt=attempt,
        )

    def _claim(self, record: Record) -> Outcome:
        self._claimed = record
        return Outcome(Decision.EXECUTE, record)

    def _take_claim(self) -> Record:
        if self._claimed is None:
            raise RuntimeError("complete()/fail() called without an EXECUTE decision")
        claimed, self._claimed = self._claimed, None
        return claimed

    def _check_payload(self, record: Record) -> None:
        if self.payload and record.payload_hash and record.payload_hash != self.payload:
            raise PayloadMismatch(self.key)

    def busy_error(self, record: Record) -> AlreadyInProgress:
        return AlreadyInProgress(self.key, record.expires_at)


def _jsonable(result: Any) -> Any:
    try:
        json.dumps(result)
    except (TypeError, ValueError):
        log.warning("run-once result of type %s is not JSON; storing null", type(result).__name__)
        return None
    return result
