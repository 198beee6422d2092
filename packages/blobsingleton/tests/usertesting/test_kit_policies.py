"""The test kit covers every policy and trigger a user's function meets: DEFER in memory (the
copies and their delays readable), `{occurrence}` on the kit's clock, and the trigger
arguments built as the worker builds them (azure-functions' own converters, from the data and
metadata the host sends: the shapes of Azure/azure-functions-python-library tests/test_timer.py
and of devhost/queue_listener.py's `host_trigger_metadata`).

Nothing here reaches storage: `AzureWebJobsStorage` is removed, so a lease, record or queue
message sent to Azure would fail with `SettingMissing`.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import UTC, datetime

import azure.functions as func
import pytest
from blobsingleton import Busy, once, singleton
from blobsingleton.testing import (
    DeferredMessage,
    FakeClock,
    MemoryBackends,
    MemoryLease,
    crashed_run,
    http_request,
    memory_backends,
    queue_message,
    timer_request,
)

charged: list[str] = []
reported: list[str] = []


@dataclass
class Receipt:
    order_id: str


@once("charge-{order_id}", busy=Busy.defer(queue="%ORDERS_QUEUE%"))
def charge(msg: func.QueueMessage) -> Receipt:
    order_id = msg.get_json()["order_id"]
    charged.append(order_id)
    return Receipt(order_id)


@singleton("import-{account}", busy=Busy.defer(queue="%IMPORT_QUEUE%"), period=20)
def import_account(msg: func.QueueMessage) -> str:
    return str(msg.get_json()["account"])


@once("report-{occurrence}", schedule="0 */5 * * * *")
def report(timer: func.TimerRequest) -> None:
    reported.append("ran")


@pytest.fixture(autouse=True)
def no_storage(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AzureWebJobsStorage", "AzureWebJobsStorage__accountName"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ORDERS_QUEUE", "orders")
    monkeypatch.setenv("IMPORT_QUEUE", "imports")
    charged.clear()
    reported.clear()


def test_a_once_defer_keeps_its_copy_and_delay_in_memory_and_the_copy_runs_later() -> None:
    body = {"order_id": "o1", "amount": 12}
    with memory_backends() as memory:
        crashed_run(memory.records_of(charge), "charge-o1", in_progress_timeout=15)
        assert charge(queue_message(body)) is None  # busy: deferred, this delivery complete
        assert memory.deferred == [DeferredMessage("orders", json.dumps(body).encode(), 16)]
        assert charged == []
        memory.clock.advance(memory.deferred[0].delay)  # the crashed run's record expired
        assert charge(memory.deferred[0].message()) == Receipt("o1")  # taken over: runs
    assert charged == ["o1"]


def test_a_singleton_defer_is_delayed_by_one_lease_period() -> None:
    with memory_backends() as memory:
        holder = MemoryLease(
            memory.lock_name(import_account, "import-acme"), memory.locks, drive_renewal=True
        ).acquire()
        assert import_account(queue_message({"account": "acme"})) is None
        assert [(d.queue, d.delay) for d in memory.deferred] == [("imports", 20)]
        assert json.loads(memory.deferred[0].body) == {"account": "acme"}
        holder.release()
        assert import_account(memory.deferred[0].message()) == "acme"
        assert len(memory.deferred) == 1


def test_a_timers_occurrence_follows_the_kits_clock() -> None:
    start = datetime(2026, 3, 2, 2, 3, 30, tzinfo=UTC)
    with memory_backends(FakeClock(start.timestamp())) as memory:
        report(timer_request())  # no schedule status: the occurrence at the clock's time
        report(timer_request())  # the same occurrence: once
        memory.clock.advance(300)
        report(timer_request())  # the next one
        keys = sorted(memory.records_of(report).records)
    assert keys == ["report-2026-03-02T02:00:00Z", "report-2026-03-02T02:05:00Z"]
    assert reported == ["ran", "ran"]


def test_a_timer_request_for_an_occurrence_carries_the_hosts_schedule_status() -> None:
    occurrence = datetime(2026, 3, 2, 2, 0, tzinfo=UTC)
    timer = timer_request(occurrence, past_due=True, last=datetime(2026, 3, 2, 1, 55, tzinfo=UTC))
    assert isinstance(timer, func.TimerRequest)
    assert timer.past_due is True
    assert timer.schedule_status == {
        "Last": "2026-03-02T01:55:00+00:00",
        "Next": "2026-03-02T02:00:00+00:00",
        "LastUpdated": "2026-03-02T01:55:00+00:00",
    }
    assert timer_request().schedule_status == {}  # no monitor: the worker's empty status
    # A catch-up at 02:07 of the missed 02:00 stands for 02:00, not the clock's latest 02:05.
    late = datetime(2026, 3, 2, 2, 7, tzinfo=UTC).timestamp()
    with memory_backends(FakeClock(late)) as memory:
        report(timer)
        assert list(memory.records_of(report).records) == ["report-2026-03-02T02:00:00Z"]


def test_a_queue_message_is_bound_as_the_worker_binds_it() -> None:
    inserted = datetime(2026, 3, 2, 2, 0, tzinfo=UTC)
    msg = queue_message(
        {"order_id": "o7"}, id="m-1", dequeue_count=3, pop_receipt="pr-1", inserted_at=inserted
    )
    assert isinstance(msg, func.QueueMessage)
    assert (msg.id, msg.dequeue_count, msg.pop_receipt) == ("m-1", 3, "pr-1")
    assert msg.insertion_time == inserted
    assert msg.get_json() == {"order_id": "o7"}
    assert queue_message(b"\xff\x00").get_body() == b"\xff\x00"  # not UTF-8: bytes as sent
    assert queue_message("plain").id != queue_message("plain").id  # a fresh id each
    # The host's binding data is case-insensitive: a JSON body's `id` field replaces the id.
    assert queue_message({"Id": "from-body"}, id="m-2").id == "from-body"


def test_an_http_request_resolves_keys_and_answers_busy_with_the_policys_response() -> None:
    def conflict(error: Exception) -> func.HttpResponse:
        return func.HttpResponse("busy", status_code=409)

    @singleton("export-{tenant}-{format}", busy=conflict)
    def export(req: func.HttpRequest) -> func.HttpResponse:
        return func.HttpResponse(json.dumps(req.get_json()), status_code=200)

    req = http_request(
        "post", "http://localhost/api/export/t1", body={"rows": 2},
        params={"format": "csv"}, route_params={"tenant": "t1"},
    )  # fmt: skip
    assert (req.method, req.params["format"], req.route_params["tenant"]) == ("POST", "csv", "t1")
    assert req.headers["content-type"] == "application/json"
    with memory_backends() as memory:
        assert export(req).status_code == 200
        memory.locks.acquire(memory.lock_name(export, "export-t1-csv"), "other", 15.0)
        assert export(req).status_code == 409


def test_a_trigger_functions_records_and_lease_are_named_through_its_trigger_decorator() -> None:
    bp = func.Blueprint()
    synced: list[str] = []

    @bp.timer_trigger(arg_name="timer", schedule="0 */5 * * * *")
    @once("tick-{occurrence}", schedule="0 */5 * * * *")
    def tick(timer: func.TimerRequest) -> None: ...

    @bp.queue_trigger(arg_name="msg", queue_name="sync", connection="AzureWebJobsStorage")
    @singleton("sync-{account}", busy=Busy.SKIP)
    def sync(msg: func.QueueMessage) -> None:
        synced.append(msg.get_json()["account"])

    with memory_backends() as memory:
        tick(timer_request())  # the trigger decorator's FunctionBuilder, called as the worker
        assert len(memory.records_of(tick).records) == 1
        memory.locks.acquire(memory.lock_name(sync, "sync-a"), "another instance", 15.0)
        sync(queue_message({"account": "a"}))  # busy: skipped
        sync(queue_message({"account": "b"}))
    assert synced == ["b"]


def test_an_async_defer_keeps_its_copy_in_memory_too() -> None:
    @once("ship-{order_id}", busy=Busy.defer(queue="%ORDERS_QUEUE%"))
    async def ship(msg: func.QueueMessage) -> str:
        return str(msg.get_json()["order_id"])

    async def deliveries(memory: MemoryBackends) -> tuple[str | None, str | None]:
        crashed_run(memory.records_of(ship), "ship-o1", in_progress_timeout=5)
        deferred = await ship(queue_message({"order_id": "o1"}))
        memory.clock.advance(memory.deferred[0].delay)
        return deferred, await ship(memory.deferred[0].message())

    with memory_backends() as memory:
        assert asyncio.run(deliveries(memory)) == (None, "o1")
        assert [(d.queue, d.delay) for d in memory.deferred] == [("orders", 6)]
