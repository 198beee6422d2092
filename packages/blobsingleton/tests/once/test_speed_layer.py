"""The speed layer (`_speed.SpeedLayer`) sits beside any store `@once` uses, a custom one
too, and a store class can opt out (`speed_layer = False`): issue 40. A store of plain operations
counting its calls, on the process's clock (its records' times are compared with it)."""

from __future__ import annotations

import time

from blobsingleton import current_run, once
from blobsingleton._speed import forget_known, speed_for
from blobsingleton.records import Status
from blobsingleton.testing import MemoryRecordStore


class CustomStore(MemoryRecordStore):
    """A user's store: four operations, no `watch`, no `get_many`."""

    speed_layer = True

    def __init__(self) -> None:
        super().__init__(clock=time.time)


class PlainStore(CustomStore):
    speed_layer = False


def _calls_of_a_duplicate(store: MemoryRecordStore) -> int:
    runs: list[int] = []

    @once("order-{n}", storage=store)
    def work(n: int) -> int:
        runs.append(n)
        return n * 10

    assert work(1) == 10
    before = store.requests
    assert work(1) == 10 and runs == [1]  # a duplicate: the stored result, not run again
    return store.requests - before


def test_a_custom_stores_duplicate_is_answered_from_the_remembered_completion() -> None:
    assert _calls_of_a_duplicate(CustomStore()) == 0


def test_a_store_that_opts_out_gets_its_own_calls_for_every_duplicate() -> None:
    # the create that conflicts, then the read of the record there
    assert _calls_of_a_duplicate(PlainStore()) == 2


def test_a_ranked_create_delay_does_not_count_against_the_runs_deadline() -> None:
    """Issue 47: where creates here often lose (a learnt lost-create rate of 0.32), a copy waits
    its rank before creating (here 1.6-2 s), longer than `in_progress_timeout` (1.5 s). The
    deadline runs from the send of the write that made the claim, so the body runs; counted
    from before the wait, `ensure_held` raised `RunLost` and the key was freed unrun."""
    store = CustomStore()
    layer = speed_for(store)
    assert layer is not None
    layer.engaged, layer.lost, layer.run_s = True, 0.32, 0.5  # rank delays up to 4 x 0.5 s
    n = next(i for i in range(2000) if 1.6 <= layer.create_delay(f"order-{i}") < 2.0)
    ran: list[int] = []

    @once("order-{n}", storage=store, in_progress_timeout=1.5)
    def work(n: int) -> int:
        current_run().ensure_held()  # the side effect's guard: the claim is still ours
        ran.append(n)
        return n

    started = time.monotonic()
    assert work(n) == n and ran == [n]
    assert time.monotonic() - started >= 1.6  # it did wait its rank
    assert store.records[f"order-{n}"].status == Status.COMPLETED


def test_a_duplicate_of_a_completed_key_is_not_counted_as_a_lost_race() -> None:
    """Issue 47: a create that conflicts with a completed record met a duplicate, not a copy
    racing it; counted as a lost race, duplicates alone made a process wait ranked delays
    before its creates. Only a record in progress (a race) counts toward contention."""
    store = CustomStore()
    layer = speed_for(store)
    assert layer is not None

    @once("order-{n}", storage=store)
    def work(n: int) -> int:
        return n

    for n in range(10):
        assert work(n) == n
    forget_known()  # the duplicates below come to storage, as in another process
    for n in range(10):
        assert work(n) == n  # each a create that conflicts, then the completed record read
    assert layer.engaged and layer.lost == 0.0 and layer.completed > 0.5
    assert layer.create_delay("order-99") == 0.0  # no ranked wait for a key never raced
