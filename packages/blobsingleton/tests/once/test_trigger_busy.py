"""Busy policies that fit the trigger, and duplicates per trigger identity, against a real
Azurite. `Busy.DEFER` re-enqueues a Storage queue message: on any other trigger it is refused
by annotation when decorated, by binding when indexed (`check_busy_policies`), by the trigger
argument at the call, each time naming what fits. Trigger arguments come from
`blobsingleton.testing`'s builders (azure-functions' own converters on host-shaped data: the
shapes of azure-functions-python-library tests/test_servicebus.py and test_blob.py)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest
from azure.functions.blob import InputStream as BlobInputStream
from azure.storage.blob import BlobServiceClient
from blobsingleton import AlreadyInProgress, Busy, BusyPolicy, once, singleton
from blobsingleton.testing import (
    blob_input_stream,
    check_busy_policies,
    cosmos_documents,
    event_grid_event,
    memory_backends,
    service_bus_message,
)

RACER = str(Path(__file__).with_name("trigger_racer.py"))


@pytest.mark.parametrize(
    ("annotation", "binding", "fit"),
    [
        (func.ServiceBusMessage, "serviceBusTrigger", "Service Bus redelivers it"),
        (func.EventHubEvent, "eventHubTrigger", "retry policy"),
        (func.EventGridEvent, "eventGridTrigger", "Event Grid retries it"),
        (func.DocumentList, "cosmosDBTrigger", "retry policy"),
        (func.InputStream, "blobTrigger", "poison"),
        (func.HttpRequest, "httpTrigger", "409 or 429"),
        (func.TimerRequest, "timerTrigger", "another instance runs this occurrence"),
    ],
)
def test_defer_is_refused_at_decoration_by_annotation(
    annotation: type, binding: str, fit: str
) -> None:
    def handler(item: Any) -> None: ...

    handler.__annotations__["item"] = annotation
    with pytest.raises(TypeError) as raised:
        once("k-{x}", busy=Busy.defer(queue="q"))(handler)
    message = str(raised.value)
    assert f"a {binding} function has none to re-enqueue" in message
    assert "Busy.wait()" in message and "Busy.skip()" in message and fit in message
    with pytest.raises(TypeError, match=binding):
        singleton("k-{x}", busy=Busy.defer(queue="q"))(handler)


def test_defer_is_still_accepted_for_a_queue_message_beside_an_input_binding() -> None:
    @once("k-{x}", busy=Busy.defer(queue="q"))
    def handler(msg: func.QueueMessage, blob: func.InputStream) -> None: ...


def _app_with(busy: BusyPolicy) -> func.FunctionApp:
    app = func.FunctionApp()

    @app.service_bus_queue_trigger(arg_name="msg", queue_name="orders", connection="SB")
    @once("charge-{order_id}", busy=busy)
    def charge(msg):  # type: ignore[no-untyped-def]  # unannotated: only the binding tells
        return None

    @app.queue_trigger(arg_name="msg", queue_name="imports", connection="AzureWebJobsStorage")
    @singleton("import-{account}", busy=Busy.defer(queue="imports"))
    @once("import-{account}", busy=Busy.defer(queue="imports"))
    def import_account(msg: func.QueueMessage) -> None: ...

    return app


def test_defer_on_an_unannotated_parameter_is_refused_at_indexing_by_binding() -> None:
    with pytest.raises(TypeError) as raised:
        check_busy_policies(_app_with(Busy.defer(queue="q")).get_functions())
    message = str(raised.value)
    assert message.startswith("charge: Busy.defer(queue=...)")
    assert "serviceBusTrigger" in message and "abandons the message" in message
    check_busy_policies(_app_with(Busy.WAIT).get_functions())  # WAIT fits; DEFER on a queue


def test_defer_given_a_service_bus_message_at_the_call_raises_before_claiming() -> None:
    runs: list[str] = []
    with memory_backends() as memory:

        @once("charge-{order_id}", busy=Busy.defer(queue="q"))
        def charge(msg: Any) -> None:  # Any: no annotation names the trigger
            runs.append("ran")

        with pytest.raises(TypeError, match="serviceBusTrigger"):
            charge(service_bus_message({"order_id": "A1"}))
        assert runs == [] and memory.records_of(charge).get("charge-A1") is None


def test_each_refuses_defer_for_service_bus_messages_as_a_single_call_does() -> None:
    """Issue 47: `fn.each` shares the single call's admission: an unannotated handler given
    Service Bus messages under `Busy.defer` is refused both ways, before anything is claimed
    (the batch path used to run the items)."""
    runs: list[str] = []
    with memory_backends() as memory:

        @once("charge-{order_id}", busy=Busy.defer(queue="q"))
        def charge(msg: Any) -> None:  # Any: no annotation names the trigger
            runs.append("ran")

        messages = [
            service_bus_message({"order_id": "A1"}),
            service_bus_message({"order_id": "A2"}),
        ]
        with pytest.raises(TypeError, match="serviceBusTrigger") as single:
            charge(messages[0])
        with pytest.raises(TypeError, match="serviceBusTrigger") as batch:
            charge.each(messages)  # type: ignore[attr-defined]
        assert str(batch.value) == str(single.value)
        assert runs == [] and memory.records_of(charge).records == {}


def test_an_async_function_refuses_defer_at_the_call_too() -> None:
    with memory_backends() as memory:

        @once("charge-{order_id}", busy=Busy.defer(queue="q"))
        async def charge(msg: Any) -> None: ...

        with pytest.raises(TypeError, match="serviceBusTrigger"):
            asyncio.run(charge(service_bus_message({"order_id": "A1"})))
        assert memory.records_of(charge).get("charge-A1") is None


def test_a_defer_under_another_decorator_is_found_at_indexing() -> None:
    app = func.FunctionApp()

    @app.event_grid_trigger(arg_name="event")
    @singleton("order-{Id}", busy=Busy.WAIT, scope="app")
    @once("order-{Id}", busy=Busy.defer(queue="q"))
    def on_order(event):  # type: ignore[no-untyped-def]
        return None

    with pytest.raises(TypeError, match=r"on_order: .*eventGridTrigger.*Event Grid retries"):
        check_busy_policies(app.get_functions())


def test_defer_given_a_cosmos_db_batch_at_the_call_is_refused() -> None:
    with memory_backends():

        @once("sync-{x}", busy=Busy.defer(queue="q"))
        def sync(docs: Any) -> None: ...

        with pytest.raises(TypeError, match="cosmosDBTrigger"):
            sync(cosmos_documents([{"id": "d-1"}]))


def _hold_first_run(fn_ran: threading.Event, release: threading.Event, runs: list[int]) -> Any:
    @once("charge-{MessageId}", busy=Busy.wait(timeout=1.0, hold=0.5))
    def charge(msg: func.ServiceBusMessage) -> str:
        runs.append(msg.delivery_count or 0)
        fn_ran.set()
        assert release.wait(30), "the test never released the first run"
        return "charged"

    return charge


def test_a_service_bus_redelivery_while_the_first_run_goes_on_runs_nothing(
    storage_env: str,
) -> None:
    """The peek-lock expired mid-run and the broker redelivered: the same MessageId with
    DeliveryCount 2 waits, then raises so the host abandons it; once the first run completed,
    the next delivery gets its stored result."""
    started, release = threading.Event(), threading.Event()
    runs: list[int] = []
    charge = _hold_first_run(started, release, runs)
    results: list[object] = []
    first = threading.Thread(
        target=lambda: results.append(charge(service_bus_message({}, message_id="m-1")))
    )
    first.start()
    assert started.wait(30)
    with pytest.raises(AlreadyInProgress):
        charge(service_bus_message({}, message_id="m-1", delivery_count=2))
    release.set()
    first.join(30)
    assert results == ["charged"]
    assert charge(service_bus_message({}, message_id="m-1", delivery_count=3)) == "charged"
    assert runs == [1]


def test_the_same_event_grid_event_twice_runs_once(storage_env: str) -> None:
    runs: list[str] = []

    @once("order-{Id}")
    def handle(event: func.EventGridEvent) -> int:
        runs.append(event.id)
        return len(runs)

    assert handle(event_grid_event({"order_id": "A"}, id="e-1")) == 1
    assert handle(event_grid_event({"order_id": "A"}, id="e-1")) == 1  # redelivered
    assert handle(event_grid_event({"order_id": "A"}, id="e-2")) == 2
    assert runs == ["e-1", "e-2"]


def test_an_overwritten_blob_runs_once_per_etag(storage_env: str) -> None:
    """A blob written to Azurite, then overwritten: each version's trigger argument carries
    the ETag storage gave it, delivered twice (Event Grid's at-least-once)."""
    imported: list[str] = []

    @once("import-{BlobTrigger}@{ETag}")
    def import_file(blob: func.InputStream) -> int:
        imported.append(blob.read().decode())
        return len(imported)

    service = BlobServiceClient.from_connection_string(storage_env)
    container = service.get_container_client(f"imports-{uuid.uuid4().hex[:12]}")
    container.create_container()
    blob = container.get_blob_client("acme.csv")

    def write(content: str) -> BlobInputStream:
        etag = blob.upload_blob(content.encode(), overwrite=True)["etag"]
        return blob_input_stream(
            content, name=f"{container.container_name}/acme.csv", etag=etag, uri=blob.url
        )

    first = write("v1")
    assert import_file(first) == 1
    again = blob_input_stream("v1", name=first.name or "", etag=first.blob_properties["ETag"])
    assert import_file(again) == 1  # delivered again: the stored result
    second = write("v2")
    assert second.blob_properties["ETag"] != first.blob_properties["ETag"]
    assert import_file(second) == 2  # overwritten: a new ETag runs again
    assert import_file(second) == 2
    assert imported == ["v1", "v2"]


def test_four_consumers_redelivered_every_message_charge_each_once(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    """Four processes get the same 40 Service Bus messages (delivery counts 1 to 4, as
    redeliveries after lost locks) at once: each message's work runs once, and every delivery
    returns its receipt."""
    executions, results = tmp_path / "executions.txt", tmp_path / "results.txt"
    procs = [
        subprocess.Popen(
            [sys.executable, RACER, str(executions), str(results), "40", str(delivery)],
            env=subprocess_env,
        )
        for delivery in range(1, 5)
    ]
    assert all(p.wait(300) == 0 for p in procs)
    ran = Counter(line.split()[0] for line in executions.read_text().splitlines())
    assert len(ran) == 40 and set(ran.values()) == {1}
    answered = Counter(results.read_text().splitlines())
    assert answered == Counter(f"m{i:03d} receipt-o{i:03d}" for i in range(40) for _ in range(4))
