"""`limit=N`: up to N holders of one key (`LeaseSemaphore`, `@singleton(limit=N)`), against a
real Azurite, in memory, and raced by real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from azure.storage.blob import BlobLeaseClient
from blobsingleton import (
    Busy,
    LeaseLost,
    LeaseTimeout,
    current_lease,
    ops,
    singleton,
)
from blobsingleton.leases import LeaseSemaphore
from blobsingleton.testing import memory_backends
from libsupport import blob_service, request_counter

HOLDER = str(Path(__file__).with_name("semaphore_holder.py"))


def _holders(leases: list[LeaseSemaphore]) -> set[int | None]:
    return {lease.slot for lease in leases}


def test_n_holders_at_once_and_the_next_one_is_refused(storage_env: str) -> None:
    held = [LeaseSemaphore("partner-api", 3).acquire(blocking=False) for _ in range(3)]
    assert _holders(held) == {0, 1, 2}
    assert all(lease.is_held for lease in held)
    with pytest.raises(LeaseTimeout):
        LeaseSemaphore("partner-api", 3).acquire(blocking=False)
    freed = held.pop(1)
    freed_slot = freed.slot
    freed.release()
    assert freed.slot is None
    fourth = LeaseSemaphore("partner-api", 3).acquire(blocking=False)
    assert fourth.slot == freed_slot
    for lease in [*held, fourth]:
        lease.release()


def test_each_slot_has_its_own_rising_fencing_token(storage_env: str) -> None:
    tokens: dict[int, list[int]] = {}
    for _ in range(6):
        with LeaseSemaphore("fenced", 2) as lease:
            assert lease.slot is not None
            tokens.setdefault(lease.slot, []).append(lease.token)
    for slot_tokens in tokens.values():
        assert slot_tokens == sorted(slot_tokens) and len(set(slot_tokens)) == len(slot_tokens)


def test_a_slot_broken_by_an_operator_is_lost_at_its_next_renewal(storage_env: str) -> None:
    seen: list[LeaseLost] = []
    lease = LeaseSemaphore("broken", 2, on_lost=seen.append).acquire()
    other = LeaseSemaphore("broken", 2).acquire()
    listed = {item["slot"]: item for item in ops.list_locks("broken").items}
    assert set(listed) == {0, 1} and all(item["held"] for item in listed.values())
    assert listed[lease.slot]["token"] == lease.token
    ops.break_lock("broken", "test", "tester", slot=lease.slot)
    assert lease._renew_step() is None  # the renewal finds the slot's lease gone
    assert lease.lost.is_set() and seen and seen[0].key == "broken"
    with pytest.raises(LeaseLost):
        lease.ensure_held()
    other.ensure_held()  # the other slot's holder is untouched
    lease.release()
    other.release()


def test_a_killed_holders_slot_is_given_by_the_lease_not_the_process(storage_env: str) -> None:
    container = blob_service().get_container_client(os.environ["LEASE_CONTAINER"])
    lease = LeaseSemaphore("expiring", 2).acquire()
    BlobLeaseClient(container.get_blob_client(lease.name)).break_lease(lease_break_period=0)
    # The slot is free again for anyone, while its old holder has not yet noticed.
    taken = [LeaseSemaphore("expiring", 2).acquire(blocking=False) for _ in range(2)]
    assert lease.slot in _holders(taken)
    for holder in taken:
        holder.release()
    lease.release()


def test_fair_waiters_past_the_first_n_do_not_take_a_freed_slot(storage_env: str) -> None:
    """Limit 2, both slots held, three waiters in line: a freed slot goes to one of the first
    two, never to the third."""
    holders = [LeaseSemaphore("line", 2).acquire() for _ in range(2)]
    got: list[int] = []
    done = threading.Event()

    def wait(number: int) -> None:
        lease = LeaseSemaphore("line", 2, fair=True, poll_interval=0.1).acquire(timeout=60)
        got.append(number)
        done.set()
        threading.Event().wait(0.5)  # hold a moment while the test looks
        lease.release()

    threads = []
    probe = LeaseSemaphore("line", 2, fair=True)
    for number in range(3):  # each joins after the last one stands in line: arrival order
        thread = threading.Thread(target=wait, args=(number,))
        thread.start()
        threads.append(thread)
        while probe.waiters() < number + 1:
            threading.Event().wait(0.05)
    holders[0].release()
    assert done.wait(30)
    assert got[0] in (0, 1)
    holders[1].release()
    for thread in threads:
        thread.join(60)
    assert sorted(got) == [0, 1, 2]


def test_uncontended_acquire_and_release_cost(storage_env: str) -> None:
    warm = [LeaseSemaphore("cost", 4).acquire(blocking=False) for _ in range(4)]
    for lease in warm:  # every slot's blob exists now
        lease.release()
    request_counter.reset()
    lease = LeaseSemaphore("cost", 4).acquire()
    lease.release()
    # from a random slot on, one request per slot asked until a free one; then fence, release
    assert request_counter.total() == 3


def test_singleton_limit_runs_up_to_n_invocations_of_one_key(storage_env: str) -> None:
    inside = threading.Barrier(3, timeout=30)
    slots: list[int | None] = []

    @singleton("partner-{partner}", limit=3, busy=Busy.SKIP)
    def call_partner(partner: str) -> str:
        lease = current_lease()
        assert isinstance(lease, LeaseSemaphore)
        slots.append(lease.slot)
        inside.wait()  # all three inside at once
        return "called"

    results: list[str | None] = []
    threads = [
        threading.Thread(target=lambda: results.append(call_partner("acme"))) for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results == ["called"] * 3
    assert sorted(s for s in slots if s is not None) == [0, 1, 2]


@pytest.mark.parametrize("limit", [0, -1, True, 2.5, "2", 65])
def test_a_limit_that_is_not_a_number_of_holders_is_refused_at_decoration(limit: object) -> None:
    with pytest.raises(ValueError, match="limit must be a whole number"):
        singleton("k", limit=limit)  # type: ignore[arg-type]


def test_memory_backends_hold_the_limit_too() -> None:
    with memory_backends() as memory:
        first = memory.lease("k", limit=2).acquire(blocking=False)
        second = memory.lease("k", limit=2).acquire(blocking=False)
        with pytest.raises(LeaseTimeout):
            memory.lease("k", limit=2).acquire(blocking=False)
        first.release()
        memory.lease("k", limit=2).acquire(blocking=False).release()
        second.release()


def _spawn(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, HOLDER, *args], env=env, stdout=subprocess.PIPE, text=True
    )


def test_racing_processes_never_hold_more_slots_than_the_limit(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    counter = tmp_path / "holders"
    counter.write_text("0 0")
    procs = [_spawn(subprocess_env, "race", "2", str(counter), "3") for _ in range(6)]
    outputs = [proc.communicate(timeout=240)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 6, outputs
    now, most = (int(x) for x in counter.read_text().split())
    assert now == 0
    assert 1 <= most <= 2, f"{most} processes held a limit-2 key at once"
    seen = [pair for out in outputs for pair in out.split()[1:]]
    assert len(seen) == 18 and len(set(seen)) == 18  # every (slot, token) once


def test_n_processes_hold_at_once_and_one_more_is_refused(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    procs = [_spawn(subprocess_env, "held", "3", "-", "hold") for _ in range(3)]
    try:
        lines = [proc.stdout.readline().split() for proc in procs if proc.stdout]
        assert sorted(int(line[1]) for line in lines) == [0, 1, 2]
        with pytest.raises(LeaseTimeout):
            LeaseSemaphore("held", 3).acquire(blocking=False)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(30)
    # SIGTERM released every slot: all three are free again at once
    taken = [LeaseSemaphore("held", 3).acquire(blocking=False) for _ in range(3)]
    for lease in taken:
        lease.release()
