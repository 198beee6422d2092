"""The run-once state machine on the in-memory store and a fake clock: milliseconds."""

from __future__ import annotations

import asyncio
import logging

import pytest
from blobsingleton import AlreadyInProgress, Busy, Mode, PayloadMismatch, once
from blobsingleton._once_handler import Decision, OnceHandler
from blobsingleton.errors import RecordConflict
from blobsingleton.records import Record, Status
from blobsingleton.testing import FakeClock, MemoryRecordStore


@pytest.fixture
def store(clock: FakeClock) -> MemoryRecordStore:
    return MemoryRecordStore(clock)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=1_700_000_000.0)


def handler(
    store: MemoryRecordStore, clock: FakeClock, mode: Mode = Mode.AT_LEAST_ONCE, **options: object
) -> OnceHandler:
    return OnceHandler(
        store, "key", mode=mode, in_progress_timeout=60, retention=3600, clock=clock, **options
    )  # type: ignore[arg-type]


def test_first_delivery_executes_and_a_duplicate_gets_the_stored_result(
    store: MemoryRecordStore, clock: FakeClock
) -> None:
    first = handler(store, clock)
    assert first.begin().decision == Decision.EXECUTE
    first.complete({"sent": 1})
    duplicate = handler(store, clock).begin()
    assert duplicate.decision == Decision.STORED and duplicate.record.result == {"sent": 1}


def test_a_delivery_during_a_run_is_busy(store: MemoryRecordStore, clock: FakeClock) -> None:
    assert handler(store, clock).begin().decision == Decision.EXECUTE
    clock.advance(59)
    outcome = handler(store, clock).begin()
    assert outcome.decision == Decision.BUSY
    assert isinstance(handler(store, clock).busy_error(outcome.record), AlreadyInProgress)


def test_a_failed_run_frees_the_key_for_the_next_delivery(
    store: MemoryRecordStore, clock: FakeClock
) -> None:
    failed = handler(store, clock)
    failed.begin()
    failed.fail()
    assert "key" not in store.records
    assert handler(store, clock).begin().decision == Decision.EXECUTE


def test_at_least_once_takes_over_a_crashed_run_after_its_timeout(
    store: MemoryRecordStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    crashed = handler(store, clock)
    crashed.begin()
    clock.advance(60)
    rerun = handler(store, clock).begin()
    assert rerun.decision == Decision.EXECUTE and rerun.record.attempt == 2
    caplog.set_level(logging.WARNING, logger="blobsingleton")
    crashed.complete("late")  # the crashed run was only slow: its write loses
    assert "taken over" in caplog.text
    assert store.records["key"].status == Status.IN_PROGRESS
    assert store.records["key"].attempt == 2


def test_at_most_once_never_reruns_a_crashed_run(
    store: MemoryRecordStore, clock: FakeClock
) -> None:
    handler(store, clock, Mode.AT_MOST_ONCE).begin()
    clock.advance(3600)
    assert handler(store, clock, Mode.AT_MOST_ONCE).begin().decision == Decision.ABANDONED


def test_a_completed_key_runs_again_once_its_retention_is_over(
    store: MemoryRecordStore, clock: FakeClock
) -> None:
    done = handler(store, clock)
    done.begin()
    done.complete(1)
    clock.advance(3599)
    assert handler(store, clock).begin().decision == Decision.STORED
    clock.advance(1)
    again = handler(store, clock).begin()
    assert again.decision == Decision.EXECUTE and again.record.attempt == 1


def test_a_duplicate_with_another_payload_is_refused(
    store: MemoryRecordStore, clock: FakeClock
) -> None:
    handler(store, clock, payload="a").begin()
    with pytest.raises(PayloadMismatch) as caught:
        handler(store, clock, payload="b").begin()
    assert isinstance(caught.value, ValueError)


def test_a_lost_creation_race_is_decided_again_on_the_winners_record(
    clock: FakeClock,
) -> None:
    class RacedStore(MemoryRecordStore):
        def put_if_absent(self, record: Record) -> Record:
            if not self.records:  # another delivery writes first
                super().put_if_absent(record.with_(owner="other", claim="other"))
                raise RecordConflict("BlobAlreadyExists")
            return super().put_if_absent(record)

    outcome = handler(RacedStore(), clock).begin()
    assert outcome.decision == Decision.BUSY and outcome.record.owner == "other"


def test_decorator_busy_policies_on_the_memory_store(store: MemoryRecordStore) -> None:
    handler(store, FakeClock(start=9e9)).begin()  # in progress "forever"

    @once("key", storage=store, busy=Busy.SKIP)
    def skipped() -> str:
        return "ran"

    @once("key", storage=store, busy=lambda error: f"busy:{type(error).__name__}")
    def answered() -> str:
        return "ran"

    @once("key", storage=store, busy=Busy.wait(timeout=0.05))
    def waited() -> str:
        return "ran"

    assert skipped() is None
    assert answered() == "busy:AlreadyInProgress"
    with pytest.raises(AlreadyInProgress):
        waited()


def test_async_decorator_runs_once_and_a_cancelled_invocation_frees_its_key(
    store: MemoryRecordStore,
) -> None:
    calls: list[str] = []

    @once("job-{name}", storage=store)
    async def job(name: str) -> str:
        calls.append(name)
        if name == "slow":
            await asyncio.sleep(30)
        return name

    async def main() -> None:
        assert await job("a") == "a"
        assert await job("a") == "a"
        task = asyncio.create_task(job("slow"))
        while "slow" not in calls:
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert calls == ["a", "slow"]
    assert "job-slow" not in store.records, "the cancelled run kept its key claimed"


def test_a_run_over_before_its_first_beat_is_not_held_until_that_beat(
    store: MemoryRecordStore, clock: FakeClock
) -> None:
    """A run over in milliseconds must not stay referenced (its handler, its record, its
    result) for the third of its in-progress timeout until its first heartbeat was due: in a
    storm of short runs that would hold thousands of them."""
    import gc
    import weakref

    first = OnceHandler(store, "first", in_progress_timeout=300, clock=clock)
    assert first.begin().decision == Decision.EXECUTE
    first.complete("done")
    gone = weakref.ref(first)
    del first
    second = OnceHandler(store, "second", in_progress_timeout=300, clock=clock)
    assert second.begin().decision == Decision.EXECUTE  # scheduling its beat drops the first's
    gc.collect()
    assert gone() is None, "a finished run is still held by the heartbeat starter"
    second.complete("done")


def test_a_record_copy_keeps_every_field_and_refuses_unknown_ones() -> None:
    record = Record(key="k", status=Status.IN_PROGRESS, started_at=1.0, expires_at=2.0)
    done = record.with_(status=Status.COMPLETED, result=[1], etag='"e"')
    assert done == Record(key="k", status=Status.COMPLETED, started_at=1.0, expires_at=2.0,
                          result=[1], etag='"e"')  # fmt: skip
    assert record.status == Status.IN_PROGRESS and record.etag is None  # the original unchanged
    with pytest.raises(TypeError, match="statuss"):
        record.with_(statuss=Status.COMPLETED)
