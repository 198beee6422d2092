"""The run-once state machine for one key, and the guard `@once` runs it as (docs/internals.md).

One loop, as in Powertools' idempotency: claim (save the record in progress); on conflict read
the record there; act on its status in one place (`_decide`: completed, replay; in progress,
busy, or taken over once expired or written under our lease by an earlier holder; another
payload, `PayloadMismatch`; at most once, abandoned); after the body, complete or free. The
outcome becomes the invocation's admission in `_admission`, beside it."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, TypeGuard

from blobsingleton._busy import RUN, Admission, Guard
from blobsingleton._events import emit
from blobsingleton._heartbeats import first_beats
from blobsingleton._invocation import thread_target
from blobsingleton._keys import validate_key
from blobsingleton._lease import leases_held
from blobsingleton._off_loop import off_loop
from blobsingleton._owner import instance_id
from blobsingleton._records import Record, RecordStore, Status, differing_fields, watches
from blobsingleton._results import Results
from blobsingleton._speed import SpeedLayer
from blobsingleton._telemetry import TAKEOVERS
from blobsingleton.errors import (
    AlreadyInProgress,
    LeaseNotHeld,
    OutsideGuardedCall,
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
#: Seconds between looks while a delivery waits for a busy key (`Busy.wait`).
POLL_INTERVAL = 1.0
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


_running: contextvars.ContextVar[OnceHandler | None] = contextvars.ContextVar(
    "once_run", default=None
)


def current_run() -> OnceHandler:
    """The run the executing `@once` invocation owns: its `key`, `attempt` (1, or more after
    takeovers of crashed runs), `token` (of the `@singleton` lease it runs under, else None)
    and `ensure_held()`, to call before a side effect that must not happen twice: it raises
    `RunLost` once another delivery took the key over (or may have)."""
    handler = _running.get()
    if handler is None:
        raise OutsideGuardedCall("current_run()", "@once")
    return handler


class Listed(Protocol):
    """A batch's look-up (`fn.each`): whether it looked at a key and the record it found there
    (None: absent), taken once; told when a create it let through lost (another instance works
    on the same batch)."""

    def first_look(self, key: str) -> tuple[bool, Record | None]: ...

    def lost(self) -> None: ...


def _no_beat() -> None:
    """No heartbeat: the target before a claim and after its run."""


class OnceHandler(Guard):
    """Drives one key through the run-once states (docs/internals.md) on a `RecordStore`: the
    guard of one `@once` invocation, claimed before the body, completed or freed after."""

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
        results: Results | None = None,
        on_replay: Callable[[Any], Any] | None = None,
        wait_timeout: float = 0.0,
        hold: float = 0.0,
        speed: SpeedLayer | None = None,
    ) -> None:
        """`clock`: epoch seconds for `started_at`/`expires_at`; expiry is storage's time.
        Made inside a `@singleton` invocation holding one lease, its records carry that lease's
        key and token (see `_lease_lost_by`). `results` (the function's result codec),
        `on_replay`, `wait_timeout` and `hold` (the busy policy's): what `@once` gives it as a
        guard. `speed`: the speed layer beside `store` (None: the store's calls alone)."""
        self.store = store
        self.speed = speed
        self.key = validate_key(key)
        self.payload = payload
        self.mode = mode
        self.in_progress_timeout = in_progress_timeout
        self.retention = retention
        self.clock = clock
        self.results, self.on_replay = results, on_replay
        #: The waiting policy: held watching `hold` s at the first look, then (when the policy
        #: waits) looked at again every POLL_INTERVAL s up to `wait_timeout` s.
        self.wait_timeout, self.hold_s = wait_timeout, hold
        #: The `@singleton` lease this run is under: its key ("" none) and fencing token.
        self.lease, self.token = _lease_held()
        #: Set when a heartbeat finds the record changed: another delivery took the key over.
        self.lost = threading.Event()
        self._claimed: Record | None = None
        self._claim_lock = threading.Lock()
        self._stop_beating = threading.Event()
        self._heartbeat: threading.Thread | None = None
        #: The heartbeat thread's target, in the claiming invocation's context (a claim sets it).
        self._beat_target: Callable[[], None] = _no_beat
        #: Monotonic time the last successful write of our claim was sent (None: no claim).
        self._confirmed_at: float | None = None
        #: This delivery's claim id, written into every record it writes (see `_ours`).
        self._claim_id = uuid.uuid4().hex

    @property
    def attempt(self) -> int:
        """The attempt this run is (1, or more after takeovers of crashed runs); 0 unclaimed."""
        claimed = self._claimed
        return claimed.attempt if claimed is not None else 0

    def begin(self, listed: Listed | None = None) -> Outcome:
        """Save the record in progress, or act on the one there: on EXECUTE the key is ours.
        The record to start from: a batch's look-up's (`listed`), else the speed layer's, else
        none (create). The claim's deadline runs from the send of the write that made it."""
        looked, record = listed.first_look(self.key) if listed is not None else (False, None)
        if not looked and self.speed is not None:
            record = self.speed.before_create(self.key)
        for _ in range(MAX_RACES):
            creates, sent_at = record is None, time.monotonic()
            try:
                if record is None:
                    written = self.store.put_if_absent(self._in_progress(1))
                    if self.speed is not None:
                        self.speed.created()
                    return self._claim(written, sent_at)
                decided = self._decide(record)
                if isinstance(decided, Outcome):
                    return decided
                return self._claim(self.store.replace(decided, record.etag or ""), sent_at)
            except RecordConflict as conflict:
                if creates and listed is not None:
                    listed.lost()
                if creates and self.speed is not None:
                    record = self.speed.lost_to(self.key, conflict.existing)
                else:
                    record = self._after_conflict(conflict)
                if self._ours(record, Status.IN_PROGRESS):  # our write landed, its answer lost
                    return self._claim(record, sent_at)
        raise RecordConflict(f"run-once key {self.key!r}: lost {MAX_RACES} races in a row")

    def _after_conflict(self, conflict: RecordConflict) -> Record | None:
        """The record there after a conflict: the store's, else read."""
        existing: Record | None = conflict.existing
        return existing or self._read()

    def _read(self) -> Record | None:
        return self.speed.read(self.key) if self.speed else self.store.get(self.key)

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

    def _admission(self, outcome: Outcome) -> Admission:
        """What `_decide`'s outcome means for the invocation: run, a replay, nothing, or busy
        (then its policy, `BusyHandling.not_admitted`): the status table's other half."""
        if outcome.decision == Decision.EXECUTE:
            return RUN
        record = outcome.record
        if outcome.decision == Decision.STORED:
            return Admission(run=False, result=self._replay(record), outcome="replayed")
        if outcome.decision == Decision.ABANDONED:
            return Admission(run=False)
        return Admission(
            run=False, busy=self.busy_error(record), retry_after=self.retry_after(record)
        )

    def _replay(self, record: Record) -> Any:
        """A duplicate's copy of the result `record` stores (each replay an `event=replay`)."""
        self._replayed(record)
        return self._copy(record)

    def _replayed(self, record: Record) -> None:
        assert self.results is not None, "a guard has its function's results"
        emit("replay", key=self.key, function=self.results.function, attempt=record.attempt)

    def _copy(self, record: Record) -> Any:
        assert self.results is not None, "a guard has its function's results"
        result = self.results.replay(self.key, record.result)
        return self.on_replay(result) if self.on_replay else result

    def replay_later(self, record: Record) -> Callable[[], Any]:
        """For a completed `record` a batch's listing found with its result in its body,
        decided as any record found (another payload: `PayloadMismatch`): the replay, whose
        result is read (one request) when it is called."""
        decided = self._decide(record)
        assert isinstance(decided, Outcome) and decided.decision == Decision.STORED
        self._replayed(record)

        def read() -> Any:
            whole = self.store.get(self.key)
            if whole is None or whole.status != Status.COMPLETED:
                raise RecordConflict(
                    f"run-once key {self.key!r}: its completed record changed (reset, or "
                    "expired) before its result was read"
                )
            return self._copy(whole)

        return read

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
            if changed and self.speed is not None:
                self.speed.remember(self.key, latest)
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

    def _look(self, hold: float, listed: Listed | None = None) -> Outcome:
        """One look: `begin`, a BUSY outcome held up to `hold` s."""
        return self.hold(self.begin(listed), hold)

    def _policy(self, wait: bool, hold: float | None, timeout: float | None) -> tuple[float, float]:
        """When a waiting delivery stops looking (monotonic), and how long its first look holds
        (`hold`, `timeout`: a batch's budget left, else the busy policy's)."""
        hold = self.hold_s if hold is None else max(0.0, hold)
        timeout = (self.wait_timeout if timeout is None else max(0.0, timeout)) if wait else 0.0
        return time.monotonic() + timeout, min(hold, timeout) if wait else hold

    def _pause(self, deadline: float, outcome: Outcome) -> float | None:
        """The waiting policy between looks: seconds to wait before the next, None to stop."""
        left = deadline - time.monotonic()
        if outcome.decision != Decision.BUSY or left <= 0:
            return None
        return min(POLL_INTERVAL, left)

    # The guard: the one loop run blocking (`enter`) or off the event loop (`enter_async`).

    def enter(
        self, wait: bool, *, hold: float | None = None, timeout: float | None = None,
        listed: Listed | None = None,
    ) -> Admission:  # fmt: skip
        """The guard's entry; a batch's item gives its budget left (`hold`, `timeout`) and its
        look-up (`listed`)."""
        deadline, hold = self._policy(wait, hold, timeout)
        outcome = self._look(hold, listed)
        while (pause := self._pause(deadline, outcome)) is not None:
            time.sleep(pause)
            outcome = self._look(0.0)  # held at the first look only
        return self._admission(outcome)

    async def enter_async(
        self, wait: bool, *, hold: float | None = None, timeout: float | None = None,
        listed: Listed | None = None,
    ) -> Admission:  # fmt: skip
        """`enter` off the event loop; cancelled, it frees any claim its request made."""
        deadline, hold = self._policy(wait, hold, timeout)
        while True:
            look = functools.partial(self._look, hold, listed)
            listed = None
            outcome = await off_loop(look, undo=self._free_if_claimed)
            if (pause := self._pause(deadline, outcome)) is None:
                return self._admission(outcome)
            await asyncio.sleep(pause)
            hold = 0.0

    def describe(self) -> dict[str, Any]:
        return {"key": self.key, "attempt": self.attempt or None, "token": self.token}

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        # A claim known as ours only after its record could expire (a create answered 500 after
        # it landed, retried seconds later) runs nothing: RunLost, and the host retries.
        self.ensure_held()
        token = _running.set(self)
        try:
            yield
        finally:
            _running.reset(token)

    def settle(self, result: Any, failed: bool) -> None:
        if failed:
            self.fail()
            return
        assert self.results is not None, "a guard has its function's results"
        stored, refused = self.results.store(self.key, result)
        self.complete(stored)
        if refused is not None:
            raise refused

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
                written = self.store.replace(done, etag)
                if self.speed is not None:
                    self.speed.completed_run(done, written)
                emit("completed", key=self.key, duration_s=self.clock() - done.started_at)
                return
            except RecordConflict as conflict:
                current = self._after_conflict(conflict)
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
        if self.speed is not None:
            self.speed.remember(self.key, None)
        for _ in range(2):
            try:
                self.store.delete(self.key, etag)
                return
            except RecordConflict as conflict:
                current = self._after_conflict(conflict)
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
        self._beat_target = thread_target(self._beat_on)  # in this invocation's context
        first_beats.schedule(
            time.monotonic() + self.in_progress_timeout / BEATS_PER_TIMEOUT,
            self._stop_beating,
            self._start_beating_thread,
        )

    def _start_beating_thread(self) -> None:
        with self._claim_lock:
            if self._stop_beating.is_set() or self._claimed is None or self._heartbeat:
                return  # run over, or an earlier claim's start came due first
            self._heartbeat = threading.Thread(
                target=self._beat_target, name=f"once-heartbeat-{self.key[:40]}", daemon=True
            )
            self._heartbeat.start()

    def _take_claim(self) -> Record:
        with self._claim_lock:  # no beat thread starts after this
            self._stop_beating.set()
            heartbeat, self._heartbeat = self._heartbeat, None
            self._beat_target = _no_beat  # (it refers back to this handler)
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
                    current = self._after_conflict(conflict)
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
    leases = leases_held.get()
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
