"""Trigger arguments for tests, built as the Python worker builds them: the `azure-functions`
package's own converters decode data and trigger metadata shaped as the Functions host sends
them (the shapes of azure-functions-python-library's tests/test_queue.py, test_servicebus.py,
test_eventhub.py, test_eventgrid.py, test_cosmosdb.py and test_blob.py). Re-exported by
`blobsingleton.testing`; they need the `azure-functions` package (imported when called).

Each builder takes the body (bytes, str, or a JSON value it serializes) and the identity the
host would send, with defaults a test rarely cares about. The `...s` builders make what a
`cardinality="many"` function gets: one list, one metadata for the whole batch.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import azure.functions as func  # type: ignore[import-untyped, import-not-found, unused-ignore]
    from azure.functions import blob, meta  # type: ignore[import-untyped, import-not-found, unused-ignore]

#: A body: bytes and str as they are, anything else serialized as JSON.
Body = bytes | str | Mapping[str, Any] | Sequence[Any] | int | float | None


@dataclass(frozen=True)
class _Collection:
    """The worker's protobuf collection datum (`collection_bytes` / `_string` / `_sint64`)."""

    bytes: list[bytes] = field(default_factory=list)
    string: list[str] = field(default_factory=list)
    sint64: list[int] = field(default_factory=list)


def _meta() -> Any:
    from azure.functions import meta  # type: ignore[import-untyped, import-not-found, unused-ignore]

    return meta


def _datum(value: Any, kind: str) -> meta.Datum:
    return _meta().Datum(value=value, type=kind)  # type: ignore[no-any-return, unused-ignore]


def _json(value: Any) -> meta.Datum:
    return _datum(json.dumps(value), "json")


def _body_datum(body: Body) -> meta.Datum:
    if isinstance(body, bytes):
        return _datum(body, "bytes")
    if isinstance(body, str):
        return _datum(body, "string")
    return _datum(json.dumps(body), "json")


def _body_bytes(body: Body) -> bytes:
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body).encode()


def _iso(moment: datetime | None) -> str:
    return (moment or datetime.now(UTC)).isoformat()


def _sys(method: str) -> meta.Datum:
    return _json({"MethodName": method, "UtcNow": _iso(None), "RandGuid": str(uuid.uuid4())})


def service_bus_message(
    body: Body = b"",
    *,
    message_id: str = "message-1",
    delivery_count: int = 1,
    sequence_number: int = 1,
    session_id: str | None = None,
    correlation_id: str | None = None,
    content_type: str | None = "application/json",
    lock_token: str | None = None,
    enqueued_time: datetime | None = None,
    user_properties: Mapping[str, Any] | None = None,
    application_properties: Mapping[str, Any] | None = None,
) -> func.ServiceBusMessage:
    """A Service Bus message as `ServiceBusMessageInConverter.decode` makes it for a
    `cardinality="one"` function. A redelivery is the same `message_id` with a higher
    `delivery_count` (and a new lock token)."""
    from azure.functions.servicebus import ServiceBusMessageInConverter  # type: ignore[import-untyped, import-not-found, unused-ignore]

    metadata: dict[str, meta.Datum] = {
        "MessageId": _datum(message_id, "string"),
        "DeliveryCount": _datum(delivery_count, "int"),
        "SequenceNumber": _datum(sequence_number, "int"),
        "LockToken": _datum(lock_token or str(uuid.uuid4()), "string"),
        "EnqueuedTimeUtc": _datum(_iso(enqueued_time), "string"),
        "UserProperties": _json(dict(user_properties or {})),
        "ApplicationProperties": _json(dict(application_properties or {})),
        "sys": _sys("ServiceBusTrigger"),
    }
    optional = {"SessionId": session_id, "CorrelationId": correlation_id}
    optional["ContentType"] = content_type
    for name, value in optional.items():
        if value is not None:
            metadata[name] = _datum(value, "string")
    message = ServiceBusMessageInConverter.decode(_body_datum(body), trigger_metadata=metadata)
    assert not isinstance(message, list)
    return message


def service_bus_messages(
    bodies: Sequence[Body],
    *,
    message_ids: Sequence[str] | None = None,
    delivery_counts: Sequence[int] | None = None,
    first_sequence_number: int = 1,
    session_id: str | None = None,
    enqueued_time: datetime | None = None,
) -> list[func.ServiceBusMessage]:
    """A batch of Service Bus messages as `ServiceBusMessageInConverter.decode` makes it for a
    `cardinality="many"` function: `message_ids` default to message-1, message-2...,
    `delivery_counts` to 1 each."""
    from azure.functions.servicebus import ServiceBusMessageInConverter  # type: ignore[import-untyped, import-not-found, unused-ignore]

    count = len(bodies)
    ids = (
        list(message_ids) if message_ids is not None else [f"message-{i + 1}" for i in range(count)]
    )
    deliveries = list(delivery_counts) if delivery_counts is not None else [1] * count
    if len(ids) != count or len(deliveries) != count:
        raise ValueError(f"{count} bodies need {count} message_ids and delivery_counts")
    sequence = [first_sequence_number + i for i in range(count)]
    metadata: dict[str, meta.Datum] = {
        "MessageIdArray": _datum(_Collection(string=ids), "collection_string"),
        "DeliveryCountArray": _datum(_Collection(sint64=deliveries), "collection_sint64"),
        "SequenceNumberArray": _datum(_Collection(sint64=sequence), "collection_sint64"),
        "LockTokenArray": _datum(
            _Collection(string=[str(uuid.uuid4()) for _ in range(count)]), "collection_string"
        ),
        "EnqueuedTimeUtcArray": _json([_iso(enqueued_time)] * count),
        "UserPropertiesArray": _json([{} for _ in range(count)]),
        "ApplicationPropertiesArray": _json([{} for _ in range(count)]),
        "sys": _sys("ServiceBusTrigger"),
    }
    if session_id is not None:
        metadata["SessionIdArray"] = _datum(
            _Collection(string=[session_id] * count), "collection_string"
        )
    data = _datum(_Collection(bytes=[_body_bytes(b) for b in bodies]), "collection_bytes")
    messages = ServiceBusMessageInConverter.decode(data, trigger_metadata=metadata)
    assert isinstance(messages, list)
    batch: list[func.ServiceBusMessage] = list(messages)
    return batch


def _partition_context(partition_id: str, event_hub: str, consumer_group: str) -> meta.Datum:
    return _json(
        {
            "ConsumerGroupName": consumer_group,
            "EventHubPath": event_hub,
            "PartitionId": partition_id,
            "Owner": str(uuid.uuid4()),
        }
    )


def event_hub_event(
    body: Body = b"",
    *,
    sequence_number: int = 1,
    partition_id: str = "0",
    offset: str | None = None,
    partition_key: str | None = None,
    enqueued_time: datetime | None = None,
    event_hub: str = "events",
    consumer_group: str = "$Default",
) -> func.EventHubEvent:
    """An Event Hubs event as `EventHubTriggerConverter.decode` makes it for a
    `cardinality="one"` function; `offset` defaults to a value from the sequence number.
    A sequence number is unique within its `partition_id` only."""
    from azure.functions.eventhub import EventHubTriggerConverter  # type: ignore[import-untyped, import-not-found, unused-ignore]

    moment = _iso(enqueued_time)
    offset = offset if offset is not None else str(sequence_number * 1024)
    system = {
        "x-opt-sequence-number": sequence_number, "x-opt-offset": offset,
        "x-opt-enqueued-time": moment, "SequenceNumber": sequence_number, "Offset": offset,
        "PartitionKey": partition_key, "EnqueuedTimeUtc": moment,
    }  # fmt: skip
    metadata: dict[str, meta.Datum] = {
        "SequenceNumber": _datum(sequence_number, "int"),
        "Offset": _datum(offset, "string"),
        "EnqueuedTimeUtc": _datum(moment, "string"),
        "Properties": _json({}),
        "SystemProperties": _json(system),
        "PartitionContext": _partition_context(partition_id, event_hub, consumer_group),
        "sys": _sys("EventHubTrigger"),
    }
    if partition_key is not None:
        metadata["PartitionKey"] = _datum(partition_key, "string")
    event = EventHubTriggerConverter.decode(_body_datum(body), trigger_metadata=metadata)
    assert not isinstance(event, list)
    return event


def event_hub_events(
    bodies: Sequence[Body],
    *,
    first_sequence_number: int = 1,
    partition_id: str = "0",
    enqueued_time: datetime | None = None,
    event_hub: str = "events",
    consumer_group: str = "$Default",
) -> list[func.EventHubEvent]:
    """A batch of Event Hubs events from one partition, as `EventHubTriggerConverter.decode`
    makes it for a `cardinality="many"` function: consecutive sequence numbers from
    `first_sequence_number`; each event's `metadata` is the batch's (its PartitionContext)."""
    from azure.functions.eventhub import EventHubTriggerConverter  # type: ignore[import-untyped, import-not-found, unused-ignore]

    moment = _iso(enqueued_time)
    system = [
        {"SequenceNumber": first_sequence_number + i, "Offset": (first_sequence_number + i) * 1024,
         "PartitionKey": None, "EnqueuedTimeUtc": moment}
        for i in range(len(bodies))
    ]  # fmt: skip
    metadata: dict[str, meta.Datum] = {
        "SystemPropertiesArray": _json(system),
        "PartitionContext": _partition_context(partition_id, event_hub, consumer_group),
        "sys": _sys("EventHubTrigger"),
    }
    data = _datum(_Collection(bytes=[_body_bytes(b) for b in bodies]), "collection_bytes")
    events = EventHubTriggerConverter.decode(data, trigger_metadata=metadata)
    assert isinstance(events, list)
    return events


def event_grid_event(
    data: Any = None,
    *,
    id: str = "event-1",
    subject: str = "",
    event_type: str = "Custom.Event",
    topic: str = "/subscriptions/0/resourceGroups/rg/providers/Microsoft.EventGrid/topics/t",
    event_time: datetime | None = None,
    data_version: str = "1.0",
) -> func.EventGridEvent:
    """An Event Grid event (Event Grid schema) as `EventGridEventInConverter.decode` makes it.
    Event Grid redelivers an event with the same `id`."""
    from azure.functions.eventgrid import EventGridEventInConverter  # type: ignore[import-untyped, import-not-found, unused-ignore]

    body = {
        "id": id, "topic": topic, "subject": subject, "eventType": event_type,
        "eventTime": _iso(event_time), "data": data, "dataVersion": data_version,
        "metadataVersion": "1",
    }  # fmt: skip
    event = EventGridEventInConverter.decode(_json(body), trigger_metadata={})
    assert not isinstance(event, list)
    return event  # type: ignore[return-value, unused-ignore]


def cloud_event(
    data: Any = None,
    *,
    id: str = "event-1",
    source: str = "/orders",
    type: str = "Custom.Event",
    subject: str | None = None,
    time: datetime | None = None,
) -> func.CloudEvent:
    """An Event Grid event in the CloudEvents 1.0 schema, as `EventGridEventInConverter.decode`
    makes it (a `specversion` field selects the schema)."""
    from azure.functions.eventgrid import EventGridEventInConverter  # type: ignore[import-untyped, import-not-found, unused-ignore]

    body = {
        "specversion": "1.0", "id": id, "source": source, "type": type, "time": _iso(time),
        "datacontenttype": "application/json", "data": data,
    }  # fmt: skip
    if subject is not None:
        body["subject"] = subject
    event = EventGridEventInConverter.decode(_json(body), trigger_metadata={})
    assert not isinstance(event, list)
    return event  # type: ignore[return-value, unused-ignore]


def blob_created_event(
    container: str,
    name: str,
    *,
    etag: str,
    id: str | None = None,
    account: str = "devstoreaccount1",
    content_length: int = 0,
    endpoint: str | None = None,
    event_time: datetime | None = None,
) -> func.EventGridEvent:
    """A `Microsoft.Storage.BlobCreated` Event Grid event for blob `container`/`name` at
    `etag` (its `data.url`, `data.eTag`), as Event Grid delivers it to a subscriber."""
    base = endpoint or f"https://{account}.blob.core.windows.net"
    data = {
        "api": "PutBlob", "requestId": str(uuid.uuid4()), "eTag": etag,
        "contentType": "application/octet-stream", "contentLength": content_length,
        "blobType": "BlockBlob", "url": f"{base.rstrip('/')}/{container}/{name}",
        "sequencer": f"{uuid.uuid4().int:032x}",
    }  # fmt: skip
    return event_grid_event(
        data,
        id=id or str(uuid.uuid4()),
        subject=f"/blobServices/default/containers/{container}/blobs/{name}",
        event_type="Microsoft.Storage.BlobCreated",
        topic=f"/subscriptions/0/resourceGroups/rg/providers/Microsoft.Storage/storageAccounts/{account}",
        event_time=event_time,
    )


def cosmos_documents(
    documents: Sequence[Mapping[str, Any]], *, first_lsn: int = 1
) -> func.DocumentList:
    """A Cosmos DB change feed batch as `CosmosDBTriggerConverter.decode` makes it: each
    document gets the system fields the feed carries (`_rid`, `_etag`, `_ts`, `_lsn` from
    `first_lsn`) unless it has them."""
    from azure.functions.cosmosdb import CosmosDBTriggerConverter  # type: ignore[import-untyped, import-not-found, unused-ignore]

    now = int(datetime.now(UTC).timestamp())
    feed = [
        {
            "_rid": f"rid-{first_lsn + i}", "_etag": f'"{uuid.uuid4()}"', "_ts": now,
            "_lsn": first_lsn + i, **document,
        }
        for i, document in enumerate(documents)
    ]  # fmt: skip
    decoded = CosmosDBTriggerConverter.decode(_json(feed), trigger_metadata={})
    assert decoded is not None
    return decoded


def blob_input_stream(
    content: bytes | str = b"",
    *,
    name: str,
    etag: str | None = None,
    uri: str | None = None,
    last_modified: datetime | None = None,
    metadata: Mapping[str, str] | None = None,
) -> blob.InputStream:
    """A blob trigger's `func.InputStream` as `BlobConverter.decode` makes it from the host's
    trigger metadata: `name` is the blob's path with its container (`BlobTrigger`). `etag`:
    its `Properties.ETag` as a host that sends it as text would; by default `{}`, as the blob
    extension of today's bundles serialises `Azure.ETag` (read the version from storage)."""
    from azure.functions.blob import BlobConverter  # type: ignore[import-untyped, import-not-found, unused-ignore]

    data = content.encode() if isinstance(content, str) else content
    properties = {
        "ETag": {} if etag is None else etag, "ContentLength": str(len(data)), "BlobType": 2,
        "LastModified": _iso(last_modified), "ContentType": "application/octet-stream",
    }  # fmt: skip
    trigger_metadata = {
        "BlobTrigger": _datum(name, "string"),
        "Uri": _datum(uri or f"https://devstoreaccount1.blob.core.windows.net/{name}", "string"),
        "Properties": _json(properties),
        "Metadata": _json(dict(metadata or {})),
        "sys": _sys("BlobTrigger"),
    }
    stream = BlobConverter.decode(_datum(data, "bytes"), trigger_metadata=trigger_metadata)
    assert stream is not None
    return stream  # type: ignore[no-any-return, unused-ignore]


__all__ = [
    "blob_created_event", "blob_input_stream", "cloud_event", "cosmos_documents",
    "event_grid_event",
    "event_hub_event", "event_hub_events", "service_bus_message",
    "service_bus_messages",
]  # fmt: skip
