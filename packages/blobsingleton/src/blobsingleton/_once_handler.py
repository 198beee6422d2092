"""The run-once state machine for one key, whatever runs the work (docs/internals.md)."""

from __future__ import annotations

import asyncio
import functools
import heapq
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeGuard

from blobsingleton._invocation import TAKEOVERS, emit, instance_id, off_loop, thread_target
from blobsingleton._keys import validate_key
from blobsingleton._record_speed import fast
from blobsingleton._records import Record, RecordStore, Status, differing_fields, watches
from blobsingleton._singleton import held
from blobsingleton.errors import (
    AlreadyInProgress,
    LeaseNotHeld,
    PayloadMismatch,
    RecordConflict,
    RunLost,
    StorageUnavailable,
)

log = logging.getLogger("blobsingleton")

#: Conditional writes lost in a row before giving up (each loss is someone else's progress).
MAX_RACES = 5
#: The default `in_progress_timeout`: how long a crashed run holds its key at most.
DEFAULT_IN_PROGRESS_TIMEOUT = 15.0
#: Beats per timeout: a beat may be late by two intervals (slow storage) and still land in time.
BEATS_PER_TIMEOUT = 3


class Mode(StrEnum):
    """What `@once(mode=...)` does about a run that crashed (its process died mid-run):

    - `AT_LEAST_ONCE` (the default): the key is run again once the crashed run's record
      expires (`in_progress_timeout`): the work is never lost, and may run twice if the crash
      came after its side effect and before its completion was written;
    - `AT_MOST_ONCE`: the key is never run again: the work may be lost, never repeated.
    """

    AT_LEAST_ONCE = "at_least_once"
    """A crashed run is retried once its record expires: one duplicate possible, nothing lost."""
    AT_MOST_ONCE = "at_most_once"
    """A crashed run is never retried: no duplicate, the work may be lost."""


class Decision(StrEnum):
    EXECUTE = "execute"
    STORED = "stored"
    BUSY = "busy"
    ABANDONED = "abandoned"


@dataclass(frozen=True)
class Outcome:
    decision: Decision
    record: Record


class OnceHandler:
    """Drives one key through the run-once states (docs/internals.md) on a `RecordStore`."""

    def __init__(
        self,
        store: RecordStore,
        key: str,
        *,
        payload: str | None = None,
        mode: Mode = Mode.AT_LEAST_ONCE,
        in_progress_timeout: float = DEFAULT_IN_PROGRESS_TIMEOUT,
        retention: float = 7 * 24 * 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`clock`: epoch seconds for `started_at`/`expires_at`; expiry is storage's time.
        `store` is used behind the speed layer (`_record_speed`) unless it opts out. Made
        inside a `@singleton` invocation holding one lease, its records carry that lease's key
        and token (see `_lease_lost_by`)."""
        self.store = fast(store)
        self.key = validate_key(key)
        self.payload = payload
        self.mode = mode
        self.in_progress_timeout = in_progress_timeout
        self.retention = retention
        self.clock = clock
        #: The `@singleton` lease this run is under: its key ("" none) and fencing token.
        self.lease, self.token = _lease_held()
        #: Set when a heartbeat finds the record changed: another delivery took the key over.
        self.lost = threading.Event()
        self._claimed: Record | None = None
        self._claim_lock = threading.Lock()
        self._stop_beating = threading.Event()
        self._heartbeat: threading.Thread | None = None
        #: Monotonic time the last successful write of our claim was sent (None: no claim).
        self._confirmed_at: float | None = None
        #: This delivery's claim id, written into every record it writes (see `_ours`).
        self._claim_id = uuid.uuid4().hex

    @property
    def attempt(self) -> int:
        """The attempt this run is (1, or more after takeovers of crashed runs); 0 unclaimed."""
        claimed = self._claimed
        return claimed.attempt if claimed is not None else 0

    def begin(self) -> Outcome:
        """Save the record in progress, or act on the one there: on EXECUTE the key is ours."""
        record: Record | None = None
        for _ in range(MAX_RACES):
            sent_at = time.monotonic()
            try:
                if record is None:
                    return self._claim(self.store.put_if_absent(self._in_progress(1)), sent_at)
                decided = self._decide(record)
                if isinstance(decided, Outcome):
                    return decided
                return self._claim(self.store.replace(decided, record.etag or ""), sent_at)
            except RecordConflict as conflict:
                record = self._current(conflict)
                if self._ours(record, Status.IN_PROGRESS):  # our write landed, its answer lost
                    return self._claim(record, sent_at)
        raise RecordConflict(f"run-once key {self.key!r}: lost {MAX_RACES} races in a row")

    def _current(self, conflict: RecordConflict) -> Record | None:
        """The record there after a conflict: the store's, else read."""
        existing: Record | None = conflict.existing
        return existing or self.store.get(self.key)

    def _ours(self, record: Record | None, status: Status) -> TypeGuard[Record]:
        """Whether `record` is this delivery's own write (by its claim id), in `status`."""
        return record is not None and record.claim == self._claim_id and record.status == status

    def _decide(self, record: Record) -> Outcome | Record:
        """What an existing `record` means: an outcome, or the record to take the key with."""
        if self.payload and record.payload_hash and record.payload_hash != self.payload:
            raise PayloadMismatch(self.key, differing_fields(record.payload_hash, self.payload))
        if record.status == Status.COMPLETED:
            if not record.expired():
                return Outcome(Decision.STORED, record)
            return self._in_progress(1)  # retention over: a new run
        if not record.expired() and not self._lease_lost_by(record):
            return Outcome(Decision.BUSY, record)
        if self.mode == Mode.AT_MOST_ONCE:
            log.warning(
                "run-once %s: earlier run did not finish; at-most-once, not rerun", self.key
            )
            return Outcome(Decision.ABANDONED, record)
        log.warning(
            "run-once %s: earlier run (attempt %d, %s) expired; taking over",
            self.key, record.attempt, record.owner,
        )  # fmt: skip
        emit("takeover", key=self.key, attempt=record.attempt + 1, previous_owner=record.owner)
        TAKEOVERS.add(1)
        return self._in_progress(record.attempt + 1)

    def _lease_lost_by(self, record: Record) -> bool:
        """Whether `record` was written under the lease this run holds, by an earlier holder
        (a lower token): that holder lost the lease or died, so its run is over."""
        return (
            self.token is not None and record.lease == self.lease
            and record.token is not None and record.token < self.token
        )  # fmt: skip

    def hold(self, outcome: Outcome, seconds: float) -> Outcome:
        """A BUSY `outcome` held up to `seconds` while the store watches the record, decided
        again when it changes or could expire; still BUSY, it is returned as of then."""
        if outcome.decision != Decision.BUSY or seconds <= 0 or not watches(self.store):
            return outcome
        seen = time.monotonic()
        deadline = seen + seconds
        while outcome.decision == Decision.BUSY:
            record = outcome.record
            expiry = seen + max(0.0, record.remaining(self.clock()))
            if time.monotonic() >= deadline:
                return Outcome(Decision.BUSY, _aged(record, time.monotonic() - seen))
            changed, latest = self.store.watch(self.key, record.etag, min(deadline, expiry))
            if changed or time.monotonic() >= expiry:
                outcome, seen = self._decided(latest if changed else None), time.monotonic()
        return outcome

    def _decided(self, record: Record | None) -> Outcome:
        """`begin`, starting from a record just learnt (None: read it, or create it)."""
        if record is not None:
            decided = self._decide(record)
            if isinstance(decided, Outcome):
                return decided
        return self.begin()

    def wait(self, timeout: float, poll_interval: float = 1.0, hold: float = 0.0) -> Outcome:
        """`begin`, held up to `hold` s, then polling while BUSY up to `timeout` s."""
        deadline = time.monotonic() + timeout
        outcome = self.hold(self.begin(), min(hold, timeout))
        while outcome.decision == Decision.BUSY and time.monotonic() < deadline:
            time.sleep(min(poll_interval, max(0.0, deadline - time.monotonic())))
            outcome = self.begin()
        return outcome

    async def begin_async(
        self, wait: float = 0.0, poll_interval: float = 1.0, hold: float = 0.0
    ) -> Outcome:
        """`wait` off the event loop; cancelled, it frees any claim its request made."""
        deadline = time.monotonic() + wait
        while True:
            outcome = await off_loop(
                functools.partial(self._begin_held, hold), undo=self._free_if_claimed
            )
            hold = 0.0  # held at the first look only
            if outcome.decision != Decision.BUSY or time.monotonic() >= deadline:
                return outcome
            await asyncio.sleep(min(poll_interval, max(0.0, deadline - time.monotonic())))

    def _begin_held(self, hold: float) -> Outcome:
        return self.hold(self.begin(), hold)

    def _free_if_claimed(self, outcome: Outcome) -> None:
        if outcome.decision == Decision.EXECUTE:
            self.fail()

    def complete(self, stored_result: Any) -> None:
        """Record the stored form of the result, which later duplicates get back."""
        claimed = self._take_claim()
        done = claimed.with_(
            status=Status.COMPLETED, result=stored_result,
            expires_at=self.clock() + self.retention, ttl=self.retention,
        )  # fmt: skip
        etag, deadline = claimed.etag or "", time.monotonic() + self.in_progress_timeout / 2
        for delay in (0.5, 1.0, 2.0, None):
            try:
                self.store.replace(done, etag)
                emit("completed", key=self.key, duration_s=self.clock() - done.started_at)
                return
            except RecordConflict as conflict:
                current = self._current(conflict)
                if self._ours(current, Status.COMPLETED):
                    return
                if not self._ours(current, Status.IN_PROGRESS):
                    log.warning(
                        "run-once %s finished after its in-progress record expired and was "
                        "taken over: this run and the takeover may both have had effects",
                        self.key,
                    )
                    return
                etag = current.etag or ""
            except StorageUnavailable:
                if delay is None or time.monotonic() + delay >= deadline:
                    raise
                time.sleep(delay)
        raise RecordConflict(f"run-once key {self.key!r}: completion kept conflicting")

    def fail(self) -> None:
        """Free the key for the next delivery (unconfirmed, the record expires by itself)."""
        claimed = self._take_claim()
        etag = claimed.etag or ""
        for _ in range(2):
            try:
                self.store.delete(self.key, etag)
                return
            except RecordConflict as conflict:
                current = self._current(conflict)
                if current is None:
                    return  # gone: our delete landed, or nothing to free
                if not self._ours(current, Status.IN_PROGRESS):
                    break
                etag = current.etag or ""
        log.warning("run-once %s: record changed before it could be freed", self.key)

    def _in_progress(self, attempt: int) -> Record:
        now = self.clock()
        return Record(
            key=self.key, status=Status.IN_PROGRESS, started_at=now,
            expires_at=now + self.in_progress_timeout, payload_hash=self.payload,
            owner=instance_id(), attempt=attempt, ttl=self.in_progress_timeout,
            claim=self._claim_id, lease=self.lease, token=self.token,
        )  # fmt: skip

    def _claim(self, record: Record, sent_at: float) -> Outcome:
        self._claimed = record
        self._confirmed_at = sent_at
        self.lost.clear()
        if self.in_progress_timeout > 0:
            self._stop_beating.clear()
            self._start_beating()
        return Outcome(Decision.EXECUTE, record)

    def _start_beating(self) -> None:
        """Start a heartbeat thread when the first beat is due (tests drive `_beat_step`)."""
        first_beats.schedule(
            time.monotonic() + self.in_progress_timeout / BEATS_PER_TIMEOUT,
            self._stop_beating,
            functools.partial(self._start_beating_thread, thread_target(self._beat_on)),
        )

    def _start_beating_thread(self, target: Callable[[], None]) -> None:
        with self._claim_lock:
            if self._stop_beating.is_set() or self._claimed is None or self._heartbeat:
                return  # run over, or an earlier claim's start came due first
            self._heartbeat = threading.Thread(
                target=target, name=f"once-heartbeat-{self.key[:40]}", daemon=True
            )
            self._heartbeat.start()

    def _take_claim(self) -> Record:
        with self._claim_lock:  # no beat thread starts after this
            self._stop_beating.set()
            heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is not None:
            heartbeat.join()
        with self._claim_lock:
            if self._claimed is None:
                raise RuntimeError("complete()/fail() called without an EXECUTE decision")
            claimed, self._claimed, self._confirmed_at = self._claimed, None, None
        return claimed

    def _beat_on(self) -> None:
        interval = self.in_progress_timeout / BEATS_PER_TIMEOUT
        while not self._stop_beating.is_set() and self._beat_step():
            if self._stop_beating.wait(interval):
                break

    def _beat_step(self) -> bool:
        """One beat; False once there is nothing left to beat for (run over, or key lost)."""
        with self._claim_lock:
            claimed = self._claimed
            if claimed is None:
                return False
            alive = claimed.with_(expires_at=self.clock() + self.in_progress_timeout)
            sent_at = time.monotonic()
            try:
                try:
                    self._claimed = self.store.replace(alive, claimed.etag or "")
                except RecordConflict as conflict:
                    current = self._current(conflict)
                    if not self._ours(current, Status.IN_PROGRESS):
                        log.warning(
                            "run-once %s: record changed under this run (taken over after it "
                            "expired): this run no longer owns the key",
                            self.key,
                        )
                        self.lost.set()
                        return False
                    self._claimed = current  # an earlier beat landed, its answer was lost
                self._confirmed_at = sent_at
            except Exception as error:  # storage trouble: try again next beat
                log.warning("run-once %s: heartbeat failed: %r", self.key, error)
            return True

    def ensure_held(self) -> None:
        """Raise `RunLost` unless this run still owns its key: call before a side effect. Lost:
        the record was taken over, or no write of ours was confirmed for `in_progress_timeout`."""
        with self._claim_lock:
            claimed, confirmed_at = self._claimed, self._confirmed_at
        if claimed is None or confirmed_at is None:
            raise RunLost(self.key, "this run holds no claim on the key")
        if self.lost.is_set():
            raise RunLost(self.key, "the record was taken over by another delivery")
        if self.in_progress_timeout > 0 and (
            time.monotonic() - confirmed_at >= self.in_progress_timeout
        ):
            raise RunLost(
                self.key,
                f"no heartbeat confirmed for {self.in_progress_timeout:g} s: the record may "
                "have expired and been taken over",
            )

    def retry_after(self, record: Record) -> float:
        """Seconds until a busy record could next change: its expiry, if its run stops beating."""
        remaining = record.remaining(self.clock())
        return max(1.0, min(remaining, self.in_progress_timeout or remaining) + 1.0)

    def busy_error(self, record: Record) -> AlreadyInProgress:
        return AlreadyInProgress(self.key, record.expires_at)


def _lease_held() -> tuple[str, int | None]:
    """The key and token of the one lease the running `@singleton` invocation holds."""
    leases = held()
    if len(leases) != 1:
        return "", None
    try:
        return leases[0].key, leases[0].token
    except LeaseNotHeld:  # lost since: no lease to write under
        return "", None


def _aged(record: Record, seconds: float) -> Record:
    """`record` as it stands `seconds` after it was read, unchanged (less time left)."""
    if record.read_at is None:
        return record
    return record.with_(read_at=record.read_at + seconds)


class _FirstBeats:
    """One thread per process that starts `@once` heartbeats when first due."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, threading.Event, Callable[[], None]]] = []
        self._changed = threading.Condition()
        self._count = 0
        self._thread: threading.Thread | None = None

    def schedule(self, at: float, stopped: threading.Event, start: Callable[[], None]) -> None:
        """Call `start` at monotonic time `at`, unless `stopped` is set by then."""
        with self._changed:
            self._count += 1
            heapq.heappush(self._due, (at, self._count, stopped, start))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="once-first-beats", daemon=True
                )
                self._thread.start()
            elif self._due[0][1] == self._count:
                self._changed.notify()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._due or self._due[0][0] > time.monotonic():
                    timeout = self._due[0][0] - time.monotonic() if self._due else None
                    self._changed.wait(timeout)
                _, _, stopped, start = heapq.heappop(self._due)
            if not stopped.is_set():
                try:
                    start()
                except Exception:  # never let one run's start stop every later one
                    log.exception("run-once: could not start a heartbeat")


first_beats = _FirstBeats()
