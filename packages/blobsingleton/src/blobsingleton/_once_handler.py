"""The run-once state machine for one key, independent of how the work is called.

    begin() ──► EXECUTE ──(work)──► complete(result)   record: in_progress → completed
       │                   └─(raises)──► fail()         record deleted: the next delivery retries
       ├──► STORED       completed before: return its stored result
       ├──► BUSY         in progress elsewhere and not expired
       └──► ABANDONED    in progress elsewhere, expired, and mode is at-most-once: never rerun

Liveness comes from a heartbeat, not from a fixed timeout: while the work runs, a thread
pushes the record's expiry `in_progress_timeout` (default 15 s) ahead every third of it. A run
that lasts an hour keeps its key; a crashed one stops beating, and its record expires within
one timeout. An expired in-progress record therefore means the earlier run crashed, was
paused, or lost storage for that long; in at-least-once mode it is taken over. Every write is
conditional (If-Match), so two deliveries racing on the same key cannot both EXECUTE, and a
heartbeat that finds the record changed knows its run was taken over (`lost` is set).
`under_lease=True` is for work already guarded by a lease whose holder is the only one that
can get here: any record found in progress is a lost run's and is taken over at once, and no
heartbeat beats (`@once(under_lease=True)`; `in_progress_timeout=0` alone only stops the
heartbeat and makes its own records expire on sight).

A delivery that finds its key BUSY can be held (`hold`): the store watches the record
(`RecordStore.watch`; the blob store checks every key waiting in the process with one request
per tick, `_record_watch`) and the delivery is decided again as soon as the record changes,
or when it could expire; still busy after the hold, its busy policy applies as before. Where
a process's keys are seldom found done, a delivery creates its record without reading it
first (`RecordStore.create_first`); a lost create race is settled by the watcher, not a
re-read. Where copies of one event race (creates here keep losing), a copy does not read
first either: it waits its rank watching the key, and the watcher's tick that covers it says
whether another copy created the record (then it is held or answered) or it creates.

No instance's clock decides an expiry: a record lives `ttl` seconds after its last write in
the storage service's time (see `_records`), so an instance whose clock is minutes off neither
takes over a live run nor keeps a crashed one's key. The holder itself measures its own
deadline on its monotonic clock from when it sent its last successful write (`ensure_held`).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import heapq
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from blobsingleton._events import emit
from blobsingleton._invocation import thread_target
from blobsingleton._keys import validate_key
from blobsingleton._offloop import off_loop
from blobsingleton._owner import instance_id
from blobsingleton._records import Record, RecordStore, Status
from blobsingleton.errors import AlreadyInProgress, PayloadMismatch, RecordConflict, RunLost

log = logging.getLogger("blobsingleton")

#: Attempts at winning a conditional write before giving up (each loss means real progress
#: by someone else, so a handful is plenty).
MAX_RACES = 5

#: The default `in_progress_timeout`: how long a crashed run holds its key at most.
DEFAULT_IN_PROGRESS_TIMEOUT = 15.0

#: How long a delivery that lost a create race waits for the winner's record to show.
LOST_RACE_WAIT = 2.0

#: Beats per timeout: a beat may be late by two intervals (slow storage) and still land in time.
BEATS_PER_TIMEOUT = 3


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
        in_progress_timeout: float = DEFAULT_IN_PROGRESS_TIMEOUT,
        retention: float = 7 * 24 * 3600.0,
        clock: Callable[[], float] = time.time,
        under_lease: bool = False,
    ) -> None:
        """`clock`: wall-clock epoch seconds, for the times a record shows people (`started_at`,
        the 0.2-compatible `expires_at`); expiry itself is judged in storage's time."""
        self.store = store
        self.key = validate_key(key)
        self.payload = payload
        self.mode = mode
        self.in_progress_timeout = in_progress_timeout
        self.retention = retention
        self.clock = clock
        #: The caller holds a lease covering this key: a record in progress is a lost run's.
        self.under_lease = under_lease
        #: Set when a heartbeat finds the record changed: another delivery took the key over.
        self.lost = threading.Event()
        self._claimed: Record | None = None
        self._claim_lock = threading.Lock()
        self._stop_beating = threading.Event()
        self._heartbeat: threading.Thread | None = None
        #: Monotonic time the last successful write of our claim was sent (None: no claim).
        self._confirmed_at: float | None = None

    def begin(self) -> Outcome:
        """Decide what this delivery does; on EXECUTE the key is claimed for us."""
        record = self.store.known(self.key)
        if record is not None:
            return self._decide_from(record)
        if self.store.create_first() or self.store.create_delay(self.key) > 0:
            # Keys here are mostly new, or copies of one event race here: the create says it
            # all (a racing copy first waits its rank, watching, see `_decide`).
            outcome = self._decide_from(None)
        else:
            outcome = self._decide_from(self.store.read(self.key))
        self.store.note_first_look(outcome.decision == Decision.STORED)
        return outcome

    def _decide_from(self, record: Record | None) -> Outcome:
        """`_decide`, re-reading after each lost race (MAX_RACES at most).

        A lost create race (the record appeared since it was read absent) is not re-read at
        once: a store that watches learns what the winner wrote at its next tick, with every
        other key waiting in this process (`RecordStore.watch`)."""
        for _ in range(MAX_RACES):
            try:
                return self._decide(record, time.monotonic())
            except RecordConflict:
                if record is None and self.store.can_watch:
                    until = time.monotonic() + LOST_RACE_WAIT
                    changed, record = self.store.watch(self.key, None, until)
                    if changed:
                        continue
                record = self.store.get(self.key)
        raise RecordConflict(f"run-once key {self.key!r}: lost {MAX_RACES} races in a row")

    def hold(self, outcome: Outcome, seconds: float) -> Outcome:
        """A BUSY `outcome`, held up to `seconds` in this process while the store watches the
        record (one request per tick for every key waiting here, see `_record_watch`): decided
        again as soon as the record changes (completed: STORED; freed: claimed), and at the
        latest when it could expire (a crashed run's takeover). Still BUSY after `seconds`, it
        is returned as of then, so `retry_after` counts from the end of the hold."""
        if outcome.decision != Decision.BUSY or seconds <= 0 or not self.store.can_watch:
            return outcome
        started = seen = time.monotonic()
        deadline = started + seconds
        while outcome.decision == Decision.BUSY:
            record = outcome.record
            expiry = seen + max(0.0, record.remaining(self.clock()))
            now = time.monotonic()
            if now >= deadline:
                return Outcome(Decision.BUSY, _aged(record, now - seen))
            changed, latest = self.store.watch(self.key, record.etag, min(deadline, expiry))
            if changed:
                outcome, seen = self._decide_from(latest), time.monotonic()
            elif time.monotonic() >= expiry:
                # Unchanged until it could expire: read it, and take over if it did.
                outcome, seen = self.begin(), time.monotonic()
        return outcome

    def wait(self, timeout: float, poll_interval: float = 1.0, hold: float = 0.0) -> Outcome:
        """`begin`, polling while another delivery is in progress, up to `timeout` seconds
        (watching the record, up to `hold` of them, where the store can)."""
        deadline = time.monotonic() + timeout
        outcome = self.hold(self.begin(), min(hold, timeout))
        while outcome.decision == Decision.BUSY and time.monotonic() < deadline:
            time.sleep(min(poll_interval, max(0.0, deadline - time.monotonic())))
            outcome = self.begin()
        return outcome

    async def begin_async(
        self, wait: float = 0.0, poll_interval: float = 1.0, hold: float = 0.0
    ) -> Outcome:
        """`begin` (held up to `hold` s, then polling up to `wait` s while BUSY) without
        blocking the event loop.

        Cancelled, it claims nothing: a claim its request made after the task was gone is freed.
        """
        deadline = time.monotonic() + wait
        held = hold
        while True:
            outcome = await off_loop(
                functools.partial(self._begin_held, held), undo=self._free_if_claimed
            )
            held = 0.0
            if outcome.decision != Decision.BUSY or time.monotonic() >= deadline:
                return outcome
            await asyncio.sleep(min(poll_interval, max(0.0, deadline - time.monotonic())))

    def _begin_held(self, hold: float) -> Outcome:
        return self.hold(self.begin(), hold)

    def _free_if_claimed(self, outcome: Outcome) -> None:
        if outcome.decision == Decision.EXECUTE:
            self.fail()

    def complete(self, result: Any) -> None:
        """Record the result; later duplicates get it back without running."""
        claimed = self._take_claim()
        done = claimed.with_(
            status=Status.COMPLETED,
            result=_jsonable(result),
            expires_at=self.clock() + self.retention,
            ttl=self.retention,
        )
        try:
            self.store.replace(done, claimed.etag or "")
            self.store.note_run(max(0.0, self.clock() - done.started_at))
            emit("completed", key=self.key, duration_s=self.clock() - done.started_at)
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
    def _decide(self, record: Record | None, sent_at: float) -> Outcome:
        """`sent_at`: monotonic time before the claiming write is sent (see `ensure_held`)."""
        if record is None:
            delay = self.store.create_delay(self.key)
            if delay > 0:  # creates race here: let the copy ranked first create, and watch
                changed, latest = self.store.watch(self.key, None, time.monotonic() + delay)
                if changed and latest is not None:
                    return self._decide(latest, time.monotonic())
            try:
                claim = self.store.put_if_absent(self._in_progress(attempt=1))
            except RecordConflict:
                self.store.note_create(lost=True)
                raise
            self.store.note_create(lost=False)
            return self._claim(claim, sent_at)
        self._check_payload(record)
        if record.status == Status.COMPLETED:
            if not record.expired():
                return Outcome(Decision.STORED, record)
            fresh = self._in_progress(attempt=1)  # retention over: a new run
            return self._claim(self.store.replace(fresh, record.etag or ""), sent_at)
        if not record.expired() and not self.under_lease:
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
        takeover = self._in_progress(attempt=record.attempt + 1)
        return self._claim(self.store.replace(takeover, record.etag or ""), sent_at)

    def _in_progress(self, attempt: int) -> Record:
        now = self.clock()
        return Record(
            key=self.key,
            status=Status.IN_PROGRESS,
            started_at=now,
            expires_at=now + self.in_progress_timeout,
            payload_hash=self.payload,
            owner=instance_id(),
            attempt=attempt,
            ttl=self.in_progress_timeout,
        )

    def _claim(self, record: Record, sent_at: float) -> Outcome:
        self._claimed = record
        self._confirmed_at = sent_at
        self.lost.clear()
        if self.in_progress_timeout > 0:
            self._stop_beating.clear()
            self._start_beating()
        return Outcome(Decision.EXECUTE, record)

    def _start_beating(self) -> None:
        """Beat from a thread of its own, started when the first beat is due: most runs end
        before that and never start one (a test overrides this and drives `_beat_step`)."""
        _first_beats.schedule(
            time.monotonic() + self.in_progress_timeout / BEATS_PER_TIMEOUT,
            self._stop_beating,
            functools.partial(self._start_beating_thread, thread_target(self._beat_on)),
        )

    def _start_beating_thread(self, target: Callable[[], None]) -> None:
        """Called by `_first_beats` once the first beat is due and the run still goes on."""
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
            claimed, self._claimed = self._claimed, None
            self._confirmed_at = None
        return claimed

    def _beat_on(self) -> None:
        """The first beat is due: push the claimed record's expiry ahead now and every
        interval after, until the run ends or the key is lost."""
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
                self._claimed = self.store.replace(alive, claimed.etag or "")
                self._confirmed_at = sent_at
            except RecordConflict:
                log.warning(
                    "run-once %s: record changed under this run (taken over after it "
                    "expired): this run no longer owns the key",
                    self.key,
                )
                self.lost.set()
                return False
            except Exception as error:  # storage trouble: try again next beat
                log.warning("run-once %s: heartbeat failed: %r", self.key, error)
            return True

    def ensure_held(self) -> None:
        """Raise `RunLost` unless this run still owns its key: call before a side effect.

        Lost means a heartbeat found the record taken over, or no write of ours has been
        confirmed for a whole `in_progress_timeout` (by this instance's monotonic clock, from
        when the write was sent), so another delivery may already be taking over.
        """
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

    def _check_payload(self, record: Record) -> None:
        if self.payload and record.payload_hash and record.payload_hash != self.payload:
            raise PayloadMismatch(self.key)

    def busy_error(self, record: Record) -> AlreadyInProgress:
        return AlreadyInProgress(self.key, record.expires_at)


class _FirstBeats:
    """One thread per process that starts a run's heartbeat thread when its first beat is due.

    Starting a thread for every run cost each delivery a thread start and join, with the
    interpreter lock handed over twice under load, though most runs end long before their
    first beat. Runs still going when it is due get their own thread, as before, so a slow
    beat of one run never delays another's."""

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


_first_beats = _FirstBeats()


def _aged(record: Record, seconds: float) -> Record:
    """`record` as it stands `seconds` after it was read, unchanged (less time left)."""
    if record.read_at is None:
        return record
    return record.with_(read_at=record.read_at + seconds)


def _jsonable(result: Any) -> Any:
    try:
        json.dumps(result)
    except (TypeError, ValueError):
        log.warning("run-once result of type %s is not JSON; storing null", type(result).__name__)
        return None
    return result
