"""The blob lease against a real Azurite."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest
from azure.storage.blob import BlobLeaseClient
from blobsingleton import BlobLease, LeaseLost, LeaseTimeout
from blobsingleton.errors import LeaseNotHeld
from blobsingleton.leases import Owner, read_lock
from libsupport import blob_service, request_counter


def test_context_manager_really_acquires_and_releases(storage_env: str) -> None:
    with BlobLease("k-ctx") as lease:
        assert lease.is_held
        with pytest.raises(LeaseTimeout):
            BlobLease("k-ctx").acquire(blocking=False)
    assert not lease.is_held
    BlobLease("k-ctx").acquire(blocking=False).release()


def test_fencing_tokens_increase_with_every_acquisition(storage_env: str) -> None:
    tokens = []
    for _ in range(4):
        with BlobLease("k-fence") as lease:
            tokens.append(lease.token)
    assert tokens == sorted(tokens) and len(set(tokens)) == 4


def test_token_of_unheld_lease_is_an_error(storage_env: str) -> None:
    with pytest.raises(LeaseNotHeld):
        _ = BlobLease("k-unheld").token


def test_blocking_acquire_times_out_with_data(storage_env: str) -> None:
    with BlobLease("k-timeout"):
        started = time.monotonic()
        with pytest.raises(LeaseTimeout) as caught:
            BlobLease("k-timeout").acquire(timeout=1.5, poll_interval=0.2)
    assert isinstance(caught.value, TimeoutError)
    assert caught.value.key == "k-timeout"
    # Not before its 1.5 s; the upper bounds, ten times that, tell a timeout from none.
    assert 1.4 <= caught.value.waited <= 10 * 1.5
    assert time.monotonic() - started < 10 * 1.5


def test_waiter_gets_the_lease_as_soon_as_the_holder_releases(storage_env: str) -> None:
    """The holder's lease lasts 60 s: a waiter that has the key within 30 s (over ten times
    the second and a poll it takes on an idle machine) had it released, not expired."""
    holder = BlobLease("k-wait", period=60).acquire()
    released = threading.Event()

    def release() -> None:
        holder.release()
        released.set()

    threading.Timer(1.0, release).start()
    started = time.monotonic()
    with BlobLease("k-wait", poll_interval=0.2) as waiter:
        waited = time.monotonic() - started
        assert waiter.token > 0 and released.is_set()
    assert waited < 30.0  # released, not expired (60 s)


def test_async_with_acquires(storage_env: str) -> None:
    async def main() -> tuple[int, bool]:
        async with BlobLease("k-async") as lease:
            busy = False
            try:
                await BlobLease("k-async").acquire_async(blocking=False)
            except LeaseTimeout:
                busy = True
            return lease.token, busy

    token, busy = asyncio.run(main())
    assert token >= 1 and busy


def test_acquire_and_release_cost_three_requests(storage_env: str) -> None:
    BlobLease("k-cost").acquire().release()  # creates the container and blob
    request_counter.reset()
    BlobLease("k-cost").acquire().release()
    assert request_counter.total() == 3


def test_owner_record_is_published_and_matched_to_the_current_token(storage_env: str) -> None:
    owner = Owner(function="nightly_import", invocation_id="inv-1")
    with BlobLease("k-owner", owner=owner, publish_owner_at_acquire=True) as lease:
        state = read_lock("k-owner")
        assert state is not None and state.leased
        assert state.owner_is_current
        assert state.owner is not None
        assert state.owner.function == "nightly_import"
        assert state.owner.invocation_id == "inv-1"
        assert state.owner.token == lease.token
    with BlobLease("k-owner") as second:
        state = read_lock("k-owner")
        assert state is not None and state.token == second.token
        assert not state.owner_is_current  # the record is the earlier holder's
    assert read_lock("never-locked") is None


def test_loss_is_visible_flag_callback_and_exception(storage_env: str) -> None:
    seen: list[LeaseLost] = []
    lease = BlobLease("k-lost", on_lost=seen.append).acquire()
    # Another party breaks the lease: the next renewal (period/3 = 5 s) finds it gone.
    container = blob_service().get_container_client(os.environ["LEASE_CONTAINER"])
    BlobLeaseClient(container.get_blob_client(lease.name)).break_lease(lease_break_period=0)
    assert lease.lost.wait(10), "loss was not detected by the renewal loop"
    assert seen and seen[0].key == "k-lost"
    with pytest.raises(LeaseLost):
        lease.ensure_held()
    assert not lease.is_held
    lease.release()  # after a loss: no error


def test_period_outside_blob_limits_is_refused(storage_env: str) -> None:
    with pytest.raises(ValueError, match="15 to 60"):
        BlobLease("k-period", period=5)


def _unleased_within(key: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        state = read_lock(key)
        if state is not None and not state.leased:
            return True
        time.sleep(0.05)
    return False


def test_cancelled_async_acquire_leaves_the_lock_blob_unleased(storage_env: str) -> None:
    BlobLease("k-cancel").acquire().release()  # the lock blob exists: only the lease is in question
    attempt_started, let_attempt_finish = threading.Event(), threading.Event()

    class InFlight(BlobLease):
        """Holds the acquire request until the test has cancelled the task awaiting it."""

        def _try_acquire(self) -> int | None:
            attempt_started.set()
            let_attempt_finish.wait(5)
            return super()._try_acquire()

    async def main() -> None:
        task = asyncio.create_task(InFlight("k-cancel").acquire_async())
        await asyncio.to_thread(attempt_started.wait, 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        let_attempt_finish.set()

    asyncio.run(main())
    # Left held, the lease would stay so for its 15 s; given back, it is free within a fraction
    # of a second (10 s: a busy machine's margin).
    assert _unleased_within("k-cancel", 10.0), "a cancelled acquire left the lease held"
    BlobLease("k-cancel").acquire(blocking=False).release()


def test_cancelled_async_with_body_releases_the_lease(storage_env: str) -> None:
    async def main() -> None:
        entered = asyncio.Event()

        async def hold() -> None:
            async with BlobLease("k-cancel-body"):
                entered.set()
                await asyncio.sleep(60)

        task = asyncio.create_task(hold())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert _unleased_within("k-cancel-body", 1.0)


def test_async_holder_makes_no_storage_call_on_the_event_loop(storage_env: str) -> None:
    """Acquire, fencing and release all run on another thread than the loop's."""
    storage_threads: list[threading.Thread] = []

    class Watched(BlobLease):
        def _try_acquire(self) -> int | None:
            storage_threads.append(threading.current_thread())
            return super()._try_acquire()

        def _release(self) -> None:
            storage_threads.append(threading.current_thread())
            super()._release()

    async def main() -> threading.Thread:
        async with Watched("k-loop"):
            await asyncio.sleep(0)
        return threading.current_thread()

    loop_thread = asyncio.run(main())
    assert len(storage_threads) == 2
    assert loop_thread not in storage_threads
