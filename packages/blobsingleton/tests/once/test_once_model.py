"""The real `OnceHandler` against a model of its record, under any interleaving of deliveries.

Hypothesis delivers one key any number of times and drives each run that got EXECUTE through
heartbeats, completion, failure, crash (the process is gone, its record left to expire), pause
and resume (no heartbeat while time passes), and the passing of time, in both modes. The
library decides; the model predicts the record. After every step:

- the stored record is the one the model predicts (status, expiry, attempt);
- the key is completed at most once: a completed record is never replaced while it is kept;
- a run whose record is fresh (claimed or beaten within `in_progress_timeout`) is never taken
  over, and a run that was taken over learns it (`lost`) at its next heartbeat;
- at-most-once never starts a second run after one that did not fail;
- a busy copy is told to come back no sooner than the record could change (its expiry), and
  no later than one timeout after: one deferral per copy, not a poll loop.

In-memory store and fake clock: milliseconds; the same machine runs on blob records in Azurite
with --long. The process-level twins are in test_once.py and
tests/notifications/test_notification_crash.py.
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass

import pytest
from blobsingleton import Mode
from blobsingleton._once_handler import Decision, OnceHandler
from blobsingleton.records import BlobRecordStore, Record, RecordStore, Status
from blobsingleton.testing import FakeClock, MemoryRecordStore
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

TIMEOUT = 15.0
RETENTION = 10.0**9  # kept for the whole run: a second completion would be a duplicate
TICKS = st.sampled_from([0.5, 1.0, 4.0, 5.0, 14.5, 15.0, 16.0, 31.0])


class SteppedHandler(OnceHandler):
    """`OnceHandler` whose heartbeat the test drives, one beat per `_beat_step()`."""

    def _start_beating(self) -> None:
        pass


@dataclass
class Run:
    handler: SteppedHandler
    attempt: int
    confirmed_at: float  # last claim or heartbeat the store accepted
    paused: bool = False


@dataclass
class Predicted:
    status: Status
    expires_at: float
    attempt: int
    owner: int | None  # the run that wrote it last


class StorageTimeFromClock(RecordStore):
    """A real store whose records are timed by the test's clock, standing in for storage's.

    The blob store's times come from Azurite's clock, which a test cannot move; this keeps
    its conditional writes and etags over HTTP while the model moves time.
    """

    def __init__(self, store: RecordStore, clock: FakeClock) -> None:
        self.store, self.clock = store, clock
        self.written: dict[str, float] = {}

    def _stamp(self, record: Record) -> Record:
        self.written[record.key] = self.clock()
        return record.with_(written_at=self.clock(), read_at=self.clock())

    def get(self, key: str) -> Record | None:
        record = self.store.get(key)
        if record is None:
            return None
        return record.with_(written_at=self.written.get(key), read_at=self.clock())

    def put_if_absent(self, record: Record) -> Record:
        return self._stamp(self.store.put_if_absent(record))

    def replace(self, record: Record, etag: str) -> Record:
        return self._stamp(self.store.replace(record, etag))

    def delete(self, key: str, etag: str) -> None:
        self.store.delete(key, etag)


class OnceModel(RuleBasedStateMachine):
    mode = Mode.AT_LEAST_ONCE

    def __init__(self, store: RecordStore | None = None) -> None:
        super().__init__()
        self.clock = FakeClock(start=1_700_000_000.0)
        self.store = (
            StorageTimeFromClock(store, self.clock) if store else MemoryRecordStore(self.clock)
        )
        self.key = f"email-{uuid.uuid4().hex[:12]}"  # a store may outlive one example
        self.record: Predicted | None = None
        self.runs: dict[int, Run] = {}
        self.ids = itertools.count(1)
        self.completions = 0
        self.unfailed_starts = 0

    def _handler(self) -> SteppedHandler:
        return SteppedHandler(
            self.store,
            self.key,
            mode=self.mode,
            in_progress_timeout=TIMEOUT,
            retention=RETENTION,
            clock=self.clock,
        )

    def _expected(self) -> Decision:
        record, now = self.record, self.clock()
        if record is None:
            return Decision.EXECUTE
        if record.status == Status.COMPLETED:
            return Decision.STORED
        if now < record.expires_at:
            return Decision.BUSY
        return Decision.ABANDONED if self.mode == Mode.AT_MOST_ONCE else Decision.EXECUTE

    def _active(self, paused: bool = False) -> list[int]:
        return sorted(i for i, run in self.runs.items() if run.paused == paused)

    def _owns(self, i: int) -> bool:
        return self.record is not None and self.record.owner == i

    # -- rules -----------------------------------------------------------------------------------
    @rule()
    def deliver(self) -> None:
        expected, now = self._expected(), self.clock()
        handler = self._handler()
        outcome = handler.begin()
        assert outcome.decision == expected, f"expected {expected}, the handler said {outcome}"
        if expected == Decision.BUSY:
            assert self.record is not None
            wait = handler.retry_after(outcome.record)
            assert self.record.expires_at - now <= wait <= TIMEOUT + 1.0
        if expected != Decision.EXECUTE:
            return
        attempt = 1 if self.record is None else self.record.attempt + 1
        i = next(self.ids)
        self.runs[i] = Run(handler, attempt, now)
        self.record = Predicted(Status.IN_PROGRESS, now + TIMEOUT, attempt, i)
        self.unfailed_starts += 1

    @precondition(lambda self: self._active())
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        i = data.draw(st.sampled_from(self._active()))
        run = self.runs[i]
        beating = run.handler._beat_step()
        if self._owns(i) and self.record and self.record.status == Status.IN_PROGRESS:
            assert beating and not run.handler.lost.is_set()
            self.record.expires_at = self.clock() + TIMEOUT
            run.confirmed_at = self.clock()
        else:
            assert not beating and run.handler.lost.is_set(), "a taken-over run did not learn it"
            del self.runs[i]  # the decorator stops the run's effects here

    @precondition(lambda self: self._active())
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        i = data.draw(st.sampled_from(self._active()))
        self.runs.pop(i).handler.complete({"sent": i})
        if self._owns(i):
            assert self.record is not None
            self.record.status = Status.COMPLETED
            self.record.expires_at = self.clock() + RETENTION
            self.completions += 1

    @precondition(lambda self: self._active())
    @rule(data=st.data())
    def fail(self, data: st.DataObject) -> None:
        i = data.draw(st.sampled_from(self._active()))
        self.runs.pop(i).handler.fail()
        if self._owns(i):
            self.record = None
            self.unfailed_starts -= 1

    @precondition(lambda self: self.runs)
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        del self.runs[data.draw(st.sampled_from(sorted(self.runs)))]

    @precondition(lambda self: self._active())
    @rule(data=st.data())
    def pause(self, data: st.DataObject) -> None:
        self.runs[data.draw(st.sampled_from(self._active()))].paused = True

    @precondition(lambda self: self._active(paused=True))
    @rule(data=st.data())
    def resume(self, data: st.DataObject) -> None:
        self.runs[data.draw(st.sampled_from(self._active(paused=True)))].paused = False

    @rule(seconds=TICKS)
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)

    # -- invariants ------------------------------------------------------------------------------
    @invariant()
    def the_store_holds_the_predicted_record(self) -> None:
        stored = self.store.get(self.key)
        if self.record is None:
            assert stored is None
            return
        assert stored is not None
        assert (stored.status, stored.expires_at, stored.attempt) == (
            self.record.status,
            self.record.expires_at,
            self.record.attempt,
        )

    @invariant()
    def completed_at_most_once(self) -> None:
        assert self.completions <= 1

    @invariant()
    def a_fresh_run_is_never_taken_over(self) -> None:
        for i, run in self.runs.items():
            if self.clock() < run.confirmed_at + TIMEOUT:
                assert self._owns(i), f"run {i} beat within its timeout but lost the key"

    @invariant()
    def at_most_once_never_starts_twice(self) -> None:
        if self.mode == Mode.AT_MOST_ONCE:
            assert self.unfailed_starts <= 1


class AtMostOnceModel(OnceModel):
    mode = Mode.AT_MOST_ONCE


_SETTINGS = settings(
    max_examples=max(150, settings.default.max_examples),  # the --long profile asks for more
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
OnceModel.TestCase.settings = _SETTINGS
AtMostOnceModel.TestCase.settings = _SETTINGS
TestAtLeastOnce = OnceModel.TestCase
TestAtMostOnce = AtMostOnceModel.TestCase


@pytest.mark.long
@pytest.mark.parametrize("model", [OnceModel, AtMostOnceModel], ids=lambda m: m.mode.value)
def test_the_model_holds_on_blob_records_in_azurite(
    storage_env: str, model: type[OnceModel]
) -> None:
    """The same machine on the blob store: real conditional writes and etags, over HTTP."""
    store = BlobRecordStore()
    run_state_machine_as_test(
        lambda: model(store),
        settings=settings(
            max_examples=40,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
