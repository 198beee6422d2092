"""The speed layer (`_records.FastRecords`) sits between `@once` and any store, a custom one
too, and a store class can opt out (`speed_layer = False`): issue 40. A store of plain operations
counting its calls, on the process's clock (its records' times are compared with it)."""

from __future__ import annotations

import time

from blobsingleton import once
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
