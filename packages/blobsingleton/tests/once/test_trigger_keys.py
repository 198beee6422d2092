"""Key templates on every trigger: a `{field}` from the body of a Service Bus message, an Event
Hubs event, an Event Grid event's data, a Cosmos DB document, an HTTP request and a Storage
queue message; each trigger's identity names; the rule of precedence; errors that name the
trigger. Trigger arguments come from `blobsingleton.testing`'s builders, which decode
host-shaped data with azure-functions' own converters (the shapes of
azure-functions-python-library tests/test_servicebus.py, test_eventhub.py, test_eventgrid.py,
test_cosmosdb.py, test_blob.py and test_queue.py; an HTTP request is built as in test_http.py).
Duplicates run against a real Azurite."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

import azure.functions as func
import pytest
from blobsingleton import current_run, once
from blobsingleton._keys import resolve_key
from blobsingleton.errors import KeyTemplateError
from blobsingleton.testing import (
    blob_input_stream,
    cloud_event,
    cosmos_documents,
    event_grid_event,
    event_hub_event,
    event_hub_events,
    queue_message,
    service_bus_message,
    service_bus_messages,
)

ORDER = {"order_id": "A1", "amount": 12}


def _queue(body: dict[str, Any]) -> func.QueueMessage:
    return queue_message(body, id="q-1")


def _http(body: dict[str, Any]) -> func.HttpRequest:
    return func.HttpRequest("POST", "/api/charge", body=json.dumps(body).encode())


#: One delivery of ORDER per trigger, and a duplicate delivery of the same item.
DELIVERIES: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
    "service bus": (
        lambda: service_bus_message(ORDER, message_id="m-1"),
        lambda: service_bus_message(ORDER, message_id="m-1", delivery_count=2),
    ),
    "event hubs": (
        lambda: event_hub_event(ORDER, sequence_number=5, partition_id="1"),
        lambda: event_hub_event(ORDER, sequence_number=5, partition_id="1"),
    ),
    "event grid": (
        lambda: event_grid_event(ORDER, id="e-1"),
        lambda: event_grid_event(ORDER, id="e-1"),
    ),
    "event grid cloudevent": (
        lambda: cloud_event(ORDER, id="c-1"),
        lambda: cloud_event(ORDER, id="c-1"),
    ),
    "cosmos db": (
        lambda: cosmos_documents([{"id": "d-1", **ORDER}])[0],
        lambda: cosmos_documents([{"id": "d-1", **ORDER}])[0],
    ),
    "http": (lambda: _http(ORDER), lambda: _http(ORDER)),
    "storage queue": (lambda: _queue(ORDER), lambda: _queue(ORDER)),
}


@pytest.mark.parametrize("trigger", sorted(DELIVERIES))
def test_a_key_from_the_body_runs_duplicates_once(storage_env: str, trigger: str) -> None:
    first, duplicate = DELIVERIES[trigger]
    runs: list[str] = []

    @once("charge-{order_id}")
    def charge(item: Any) -> dict[str, bool]:  # Any: the trigger's own type is not read
        runs.append(current_run().key)
        return {"charged": item is not None}

    assert charge(first()) == {"charged": True}
    assert charge(duplicate()) == {"charged": True}  # the stored result: not run again
    assert runs == ["charge-A1"]


def _key(template: str, value: Any) -> str:
    def fn(item: Any) -> None: ...

    return resolve_key(template, inspect.signature(fn), (value,), {})


SERVICE_BUS = service_bus_message(
    {"order_id": "A1"}, message_id="m-7", delivery_count=3, session_id="s-2", sequence_number=41
)
HUB_EVENT = event_hub_event({"order_id": "A1"}, sequence_number=9, partition_id="4")
GRID_EVENT = event_grid_event(
    {"order_id": "A1"}, id="e-3", subject="/orders/A1", event_type="Shop.OrderPlaced"
)
CLOUD = cloud_event(
    {"order_id": "A1"}, id="c-1", source="/shop", type="Shop.OrderPlaced", subject="/orders/A1"
)
DOCUMENT = cosmos_documents([{"id": "d-5", "order_id": "A1"}], first_lsn=77)[0]
BLOB = blob_input_stream(b'{"order_id": "A1"}', name="imports/a.csv", etag="0x8D1")


@pytest.mark.parametrize(
    ("template", "value", "key"),
    [
        ("{MessageId}/{DeliveryCount}/{SessionId}", SERVICE_BUS, "m-7/3/s-2"),
        ("{message_id}/{delivery_count}/{session_id}", SERVICE_BUS, "m-7/3/s-2"),
        ("{SequenceNumber}", SERVICE_BUS, "41"),
        ("{PartitionId}-{SequenceNumber}", HUB_EVENT, "4-9"),
        ("{partition_id}-{sequence_number}-{Offset}", HUB_EVENT, "4-9-9216"),
        ("{Id}|{Subject}|{EventType}", GRID_EVENT, "e-3|/orders/A1|Shop.OrderPlaced"),
        ("{id}|{subject}|{event_type}", GRID_EVENT, "e-3|/orders/A1|Shop.OrderPlaced"),
        ("{Id}|{Type}|{Source}|{Subject}", CLOUD, "c-1|Shop.OrderPlaced|/shop|/orders/A1"),
        ("{Id}-{Lsn}-{_lsn}", DOCUMENT, "d-5-77-77"),
        ("{BlobTrigger}@{ETag}", BLOB, "imports/a.csv@0x8D1"),
        ("{name}@{etag}", BLOB, "imports/a.csv@0x8D1"),
        ("{Id}/{DequeueCount}", _queue({"order_id": "A1"}), "q-1/1"),
    ],
)
def test_each_trigger_offers_its_identity_names(template: str, value: Any, key: str) -> None:
    assert _key(template, value) == key


def test_a_cosmos_documents_etag_is_its_own() -> None:
    assert _key("{ETag}", DOCUMENT) == DOCUMENT["_etag"] == _key("{_etag}", DOCUMENT)


def test_precedence_arguments_then_body_then_identity() -> None:
    message = service_bus_message({"MessageId": "from-body"}, message_id="from-host")
    assert _key("{MessageId}", message) == "from-body"  # a body field overrides, as in WebJobs
    assert _key("{item.message_id}", message) == "from-host"  # a path through the argument
    assert _key("{message_id}", message) == "from-host"  # not in the body: the identity

    def fn(order_id: str, msg: func.ServiceBusMessage) -> None: ...

    bound = resolve_key("{order_id}", inspect.signature(fn), ("arg", SERVICE_BUS), {})
    assert bound == "arg"  # an argument before its body


def test_http_route_and_query_come_before_its_json_body() -> None:
    request = func.HttpRequest(
        "POST", "/api/x", body=b'{"account": "body", "order_id": "B2"}',
        route_params={"account": "route"},
    )  # fmt: skip
    assert _key("{account}-{order_id}", request) == "route-B2"


def test_an_http_body_is_parsed_only_when_a_field_gets_there() -> None:
    class Request:  # counts what func.HttpRequest is asked (the shape key templates read)
        route_params = {"account": "route"}
        params: dict[str, str] = {}
        reads = 0

        def get_body(self) -> bytes:
            Request.reads += 1
            return b'{"order_id": "B2"}'

    request = Request()
    assert _key("{account}", request) == "route" and Request.reads == 0
    assert _key("{account}-{order_id}", request) == "route-B2" and Request.reads == 1
    upload = func.HttpRequest(
        "POST", "/api/x", body=b"\x89PNG not json", route_params={"account": "route"}
    )
    assert _key("{account}", upload) == "route"
    with pytest.raises(KeyTemplateError, match="HTTP request"):
        _key("{order_id}", upload)


def test_an_event_hubs_sequence_number_needs_its_partition() -> None:
    with pytest.raises(KeyTemplateError, match=r"only within its partition.*\{PartitionId\}"):
        _key("ingest-{SequenceNumber}", HUB_EVENT)
    with pytest.raises(KeyTemplateError, match="PartitionId"):
        _key("ingest-{offset}", HUB_EVENT)
    with pytest.raises(KeyTemplateError, match=r"item\.metadata\.PartitionContext\.PartitionId"):
        _key("ingest-{item.sequence_number}", HUB_EVENT)  # a path through the event: the same
    assert _key("ingest-{PartitionId}-{item.sequence_number}", HUB_EVENT) == "ingest-4-9"


def test_a_batch_item_keys_like_a_single_one() -> None:
    events = event_hub_events([{"order_id": "A"}, {"order_id": "B"}], first_sequence_number=3)
    assert [_key("{order_id}-{PartitionId}-{SequenceNumber}", e) for e in events] == [
        "A-0-3",
        "B-0-4",
    ]
    messages = service_bus_messages([{"order_id": "A"}, b"not json"], delivery_counts=[1, 2])
    assert [_key("{MessageId}/{DeliveryCount}", m) for m in messages] == [
        "message-1/1",
        "message-2/2",
    ]
    assert _key("{order_id}", messages[0]) == "A"


def test_a_blobs_content_is_never_read_for_a_key() -> None:
    with pytest.raises(KeyTemplateError) as raised:
        _key("import-{order_id}", BLOB)
    message = str(raised.value)
    assert "blob (blobTrigger)" in message and "content is never read" in message
    assert "{BlobTrigger}" in message and "{ETag}" in message


@pytest.mark.parametrize(
    ("value", "names"),
    [
        (SERVICE_BUS, ["Service Bus message (serviceBusTrigger)", "{MessageId}", "order_id"]),
        (HUB_EVENT, ["Event Hubs event (eventHubTrigger)", "{PartitionId}", "order_id"]),
        (GRID_EVENT, ["Event Grid event (eventGridTrigger)", "data fields order_id", "{Id}"]),
        (DOCUMENT, ["Cosmos DB document (cosmosDBTrigger)", "{Id}", "_lsn"]),
        (CLOUD, ["Event Grid CloudEvent (eventGridTrigger)", "{Source}", "order_id"]),
        (service_bus_message(b"\x00 not json"), ["no JSON body fields", "{MessageId}"]),
    ],
)
def test_an_unknown_field_names_the_trigger_and_what_it_offers(
    value: Any, names: list[str]
) -> None:
    with pytest.raises(KeyTemplateError) as raised:
        _key("charge-{customer}", value)
    for name in names:
        assert name in str(raised.value)


def test_a_list_argument_is_named_a_batch() -> None:
    with pytest.raises(KeyTemplateError, match=r"list of 2 Service Bus messages \(a batch"):
        _key("charge-{order_id}", service_bus_messages([ORDER, ORDER]))
    with pytest.raises(KeyTemplateError, match=r"list of 1 Cosmos DB documents \(a batch"):
        _key("sync-{order_id}", cosmos_documents([{"id": "d-1", **ORDER}]))


def test_a_blob_etag_the_host_sends_as_an_empty_object_is_no_version() -> None:
    """Today's blob extension serialises `Properties.ETag` (an `Azure.ETag`) as `{}`: every
    version would look alike, so `{ETag}` is refused there, never resolved to one key."""
    host_shaped = blob_input_stream(b"v1", name="imports/a.csv")
    assert host_shaped.blob_properties is not None
    assert host_shaped.blob_properties["ETag"] == {}
    with pytest.raises(KeyTemplateError):
        _key("{BlobTrigger}@{ETag}", host_shaped)
    assert _key("{BlobTrigger}", host_shaped) == "imports/a.csv"
