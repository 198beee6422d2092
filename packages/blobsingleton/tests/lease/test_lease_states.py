"""The lease state machine on the in-memory backend and a fake clock: milliseconds, no storage."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
from blobsingleton import LeaseLost, LeaseTimeout
from blobsingleton._lease import CLOCK_MARGIN
from blobsingleton._off_loop import off_loop
from blobsingleton.testing import FakeClock, MemoryLocks
from libsupport import SteppedLease


@pytest.fixture
def locks() -> MemoryLocks:
    return MemoryLocks(FakeClock())


def test_acquire_takes_a_free_key_and_a_second_holder_is_refused(locks: MemoryLocks) -> None:
    first = SteppedLease("k", locks).acquire(blocking=False)
    assert first.is_held and first.token == 1 and locks.leased("k")
    with pytest.raises(LeaseTimeout) as caught:
        SteppedLease("k", locks).acquire(blocking=False)
    assert caught.value.key == "k"
    first.release()
    assert not first.is_held and not locks.leased("k")
    assert SteppedLease("k", locks).acquire(blocking=False).token == 2


def test_renewal_every_third_of_the_period_keeps_the_lease_past_its_first_period(
    locks: MemoryLocks,
) -> None:
    lease = SteppedLease("k", locks).acquire(blocking=False)
    for _ in range(6):  # 30 s: two periods
        locks.clock.advance(5)
        assert lease.renew_now() == 5.0
        assert lease.is_held
    lease.ensure_held()


def test_unrenewed_lease_expires_locally_before_storage_frees_it(locks: MemoryLocks) -> None:
    seen: list[LeaseLost] = []
    lease = SteppedLease("k", locks, on_lost=seen.append).acquire(blocking=False)
    locks.clock.advance(15 - CLOCK_MARGIN)
    assert locks.leased("k"), "storage still has it"
    assert not lease.is_held, "but the holder no longer trusts it"
    with pytest.raises(LeaseLost, match="not renewed within its period"):
        lease.ensure_held()
    assert lease.lost.is_set() and seen and seen[0].token == 1


def test_takeover_after_expiry_gets_a_higher_token_and_the_old_holder_learns_it_lost(
    locks: MemoryLocks,
) -> None:
    old = SteppedLease("k", locks).acquire(blocking=False)
    locks.clock.advance(16)  # paused past its period: storage frees it
    new = SteppedLease("k", locks).acquire(blocking=False)
    assert new.token > old.token
    assert old.renew_now() is None  # renewal finds another lease id
    with pytest.raises(LeaseLost, match="LeaseIdMismatch"):
        old.ensure_held()
    old.release()  # after a loss: no error, and the new holder keeps the key
    assert new.is_held and locks.leased("k")


def test_broken_lease_is_reported_once_through_flag_callback_and_exception(
    locks: MemoryLocks,
) -> None:
    seen: list[LeaseLost] = []
    lease = SteppedLease("k", locks, on_lost=seen.append).acquire(blocking=False)
    locks.break_lease("k")
    locks.clock.advance(5)
    assert lease.renew_now() is None
    assert lease.renew_now() is None
    assert len(seen) == 1 and lease.lost.is_set() and not lease.is_held


def test_transient_renewal_failure_is_retried_sooner_and_the_lease_kept(
    locks: MemoryLocks,
) -> None:
    lease = SteppedLease("k", locks).acquire(blocking=False)
    locks.failing_renewals = 2
    locks.clock.advance(5)
    assert lease.renew_now() == 1.0  # retried after a second, not a third of the period
    locks.clock.advance(1)
    assert lease.renew_now() == 1.0
    locks.clock.advance(1)
    assert lease.renew_now() == 5.0
    assert lease.is_held
    locks.clock.advance(14)  # measured from the last successful renewal
    assert lease.is_held


def test_renewal_failing_until_the_period_runs_out_declares_the_lease_lost(
    locks: MemoryLocks,
) -> None:
    lease = SteppedLease("k", locks).acquire(blocking=False)
    locks.failing_renewals = 1000
    locks.clock.advance(5)
    retries = 0
    while (wait := lease.renew_now()) is not None:
        retries += 1
        locks.clock.advance(wait)
    assert retries == 10  # a retry a second from 5 s to 15 s minus the clock margin
    assert locks.clock.now - 1000 >= 15 - CLOCK_MARGIN
    with pytest.raises(LeaseLost, match="renewal failed until the period ran out"):
        lease.ensure_held()


def test_records_of_an_off_loop_call_are_emitted_by_the_awaiting_task() -> None:
    tasks: list[asyncio.Task[object] | None] = []

    class Where(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            try:
                tasks.append(asyncio.current_task())
            except RuntimeError:
                tasks.append(None)

    async def main() -> asyncio.Task[object] | None:
        await off_loop(lambda: logging.getLogger("blobsingleton").warning("from the thread"))
        return asyncio.current_task()

    handler = Where()
    logging.getLogger("blobsingleton").addHandler(handler)
    try:
        task = asyncio.run(main())
    finally:
        logging.getLogger("blobsingleton").removeHandler(handler)
    assert tasks == [task]


def test_cancelled_async_acquire_gives_back_what_its_attempt_took(locks: MemoryLocks) -> None:
    attempt_started, let_attempt_finish = threading.Event(), threading.Event()

    class SlowLease(SteppedLease):
        def _try_acquire(self) -> int | None:
            attempt_started.set()
            let_attempt_finish.wait(5)
            return super()._try_acquire()

    lease = SlowLease("k", locks)

    async def main() -> None:
        task = asyncio.create_task(lease.acquire_async())
        await asyncio.to_thread(attempt_started.wait, 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        let_attempt_finish.set()  # the request lands after the task is gone

    asyncio.run(main())
    for _ in range(500):
        if lease._token is None and locks.requests >= 2:
            break
        threading.Event().wait(0.002)
    assert not locks.leased("k") and not lease.is_held
