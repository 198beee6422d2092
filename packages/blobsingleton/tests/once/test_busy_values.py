"""`busy=` and `storage=`: one value each on both decorators, every mistake refused when the
function is decorated (naming the parameter the decorator has), and where things live given
by one value (checked against Azurite's blob names)."""

from __future__ import annotations

import inspect
import os
from typing import Any

import azure.functions as func
import pytest
from azure.storage.blob import BlobServiceClient
from blobsingleton import Busy, Storage, StorageAccount, current_lease, once, singleton
from blobsingleton._busy import Answer, BusyHandling, Defer
from blobsingleton.testing import MemoryRecordStore, crashed_run, memory_backends

#: What a user writes by mistake, and the words the refusal must name.
MISTAKES: list[tuple[str, Any, type[Exception], str]] = [
    ("once", Busy.DEFER, ValueError, r"@once\(busy=Busy\.DEFER\).*busy=Busy\.defer\(queue="),
    ("singleton", Busy.DEFER, ValueError, r"@singleton\(busy=Busy\.DEFER\).*Busy\.defer\(queue="),
    ("once", "wait", TypeError, r"@once\(busy=\.\.\.\) takes Busy\.wait"),
    ("singleton", 3, TypeError, r"@singleton\(busy=\.\.\.\) takes Busy\.wait"),
    ("once", Busy.answer(409), TypeError, r"@once\(busy=Busy\.answer\(fn\)\): fn must be callable"),  # type: ignore[arg-type]
    ("once", Busy.wait(timeout=-1), ValueError, r"Busy\.wait\(timeout=\.\.\.\).*at least 0"),
    ("once", Busy.skip(hold=-0.5), ValueError, r"Busy\.skip\(hold=\.\.\.\).*at least 0"),
    ("singleton", Busy.wait(hold=2), ValueError, r"@singleton\(busy=Busy\.wait\(hold=\.\.\.\)\)"),
    ("singleton", Busy.defer(queue="q", hold=1), ValueError, r"a lease has no hold"),
]


@pytest.mark.parametrize(("decorator", "busy", "error", "words"), MISTAKES)
def test_a_busy_mistake_is_refused_when_decorated_naming_busy(
    decorator: str, busy: Any, error: type[Exception], words: str
) -> None:
    make = once if decorator == "once" else singleton
    with pytest.raises(error, match=words) as raised:
        make("k-{x}", busy=busy)  # before any function, let alone a call
    assert "on_busy" not in str(raised.value) and "on_in_progress" not in str(raised.value)


def test_the_shorthands_are_the_default_values() -> None:
    assert Busy.wait() == Busy.WAIT and Busy.skip() == Busy.SKIP
    assert Busy.wait(timeout=5) != Busy.WAIT
    hold = BusyHandling.of(Busy.wait(timeout=1.0), "once").hold(3.0)
    assert hold == 1.0  # under wait, the hold is at most the timeout
    assert BusyHandling.of(Busy.SKIP, "once").hold(3.0) == 0.0  # skip answers at once
    assert BusyHandling.of(lambda e: 409, "once").policy.hold is None  # a callable: the default
    assert isinstance(BusyHandling.of(lambda e: 409, "once").policy, Answer)


def test_a_deferral_goes_to_its_own_account_else_where_the_records_live() -> None:
    records = StorageAccount(blob_url="https://records.blob.core.windows.net")
    queues = StorageAccount(blob_url="https://queues.blob.core.windows.net")
    mine = BusyHandling.of(Busy.defer(queue="q", storage=queues), "once", storage=records)
    theirs = BusyHandling.of(Busy.defer(queue="q"), "once", storage=records)
    assert mine.storage is queues and theirs.storage is records
    assert isinstance(mine.policy, Defer) and mine.policy.queue == "q"


def test_once_takes_at_most_twelve_parameters_and_no_loose_busy_options() -> None:
    parameters = inspect.signature(once).parameters
    assert len(parameters) <= 12, list(parameters)
    gone = {"on_in_progress", "wait_timeout", "queue", "defer_seconds", "hold_busy", "store",
            "namespace", "under_lease"}  # fmt: skip
    assert not gone & set(parameters)
    assert not {"on_busy", "wait_timeout", "queue", "defer_seconds", "container", "namespace"} & (
        set(inspect.signature(singleton).parameters)
    )


def test_what_could_not_apply_is_refused_when_decorated() -> None:
    store = MemoryRecordStore()
    with pytest.raises(ValueError, match=r"@once\(scope='app', storage=<a RecordStore>\)"):
        once("k-{x}", scope="app", storage=store)
    with pytest.raises(ValueError, match=r"@once\(scope='function', storage=<a RecordStore>\)"):
        once("k-{x}", scope="function", storage=store)
    container = BlobServiceClient("https://a.blob.core.windows.net").get_container_client("c")
    with pytest.raises(ValueError, match=r"BlobRecordStore\(container"):
        once("k-{x}", storage=Storage(container=container))
    with pytest.raises(ValueError, match="give one of them"):
        Storage(account=StorageAccount(blob_url="https://a.blob.core.windows.net"),
                container=container)  # fmt: skip
    with pytest.raises(TypeError, match=r"@once\(storage=\.\.\.\) takes a StorageAccount"):
        once("k-{x}", storage="runonce")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"@singleton\(storage=\.\.\.\) takes a StorageAccount"):
        singleton("k-{x}", storage=store)  # type: ignore[arg-type]


def test_a_record_store_given_keeps_the_keys_as_given() -> None:
    store = MemoryRecordStore()

    @once("invoice-{n}", storage=store, busy=Busy.skip())
    def invoice(n: int) -> str:
        return f"invoice {n}"

    assert invoice(7) == invoice(7) == "invoice 7"
    assert set(store.records) == {"invoice-7"}


def test_a_deferral_in_memory_uses_the_policys_queue_and_delay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from blobsingleton.testing import queue_message

    monkeypatch.setenv("ORDERS_QUEUE", "orders")
    with memory_backends() as memory:

        @once("ship-{order_id}", busy=Busy.defer(queue="%ORDERS_QUEUE%", after=42, hold=0))
        def ship(order_id: str, msg: func.QueueMessage) -> str:
            return order_id

        crashed_run(memory.records_of(ship), "ship-o1", in_progress_timeout=15)
        msg = queue_message({"order_id": "o1"})
        assert ship("o1", msg) is None
        [(queue, _, delay)] = memory.deferred
        assert (queue, delay) == ("orders", 42)


def _blob_names(container: str) -> list[str]:
    service = BlobServiceClient.from_connection_string(os.environ["AzureWebJobsStorage"])
    return [blob.name for blob in service.get_container_client(container).list_blobs()]


def test_storage_names_the_account_and_namespace_of_records_and_locks(storage_env: str) -> None:
    account = StorageAccount(connection_string=storage_env)
    where = Storage(account, namespace="billing")

    @singleton("night-{day}", scope="app", storage=where)
    @once("night-{day}", scope="app", storage=where)
    def night(day: str) -> str:
        return current_lease().key

    assert night("mon") == night("mon") == "night-mon"
    records = _blob_names(os.environ["RUNONCE_CONTAINER"])
    locks = _blob_names(os.environ["LEASE_CONTAINER"])
    assert records and all(name.startswith("billing/") for name in records), records
    assert locks and all(name.startswith("billing/") for name in locks), locks
