"""Event Hubs events as the Python worker gives a function with cardinality="many": decoded by
`azure.functions`' own converter from data and trigger metadata shaped as the host sends them
(the shapes of azure-functions-python-library's tests/test_eventhub.py,
`_generate_multiple_iothub_data('collection_bytes')` and `_generate_multiple_trigger_metadata`,
with the system properties the Event Hubs extension adds per event: SequenceNumber, Offset,
PartitionKey, EnqueuedTimeUtc; and the batch's PartitionContext, partition 0)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import azure.functions as func
from azure.functions import meta
from azure.functions.eventhub import EventHubTriggerConverter


def events(bodies: list[dict[str, Any]], first_sequence: int) -> list[func.EventHubEvent]:
    """One batch of events, sequence numbers from `first_sequence` (one partition)."""
    data = meta.Datum(
        SimpleNamespace(bytes=[json.dumps(body).encode() for body in bodies]), "collection_bytes"
    )
    enqueued = datetime(2026, 11, 27, 12, 0, tzinfo=UTC).isoformat()
    properties = [
        {"SequenceNumber": first_sequence + i, "Offset": str(4096 * (first_sequence + i)),
         "PartitionKey": None, "EnqueuedTimeUtc": enqueued}
        for i in range(len(bodies))
    ]  # fmt: skip
    decoded = EventHubTriggerConverter.decode(
        data,
        trigger_metadata={
            "SystemPropertiesArray": meta.Datum(json.dumps(properties), "json"),
            "PartitionContext": meta.Datum(json.dumps({"PartitionId": "0"}), "json"),
        },
    )
    assert isinstance(decoded, list)
    return decoded


def orders(count: int, first_sequence: int = 1_000_000) -> list[func.EventHubEvent]:
    """`count` order events, `order_id` o<sequence number>."""
    bodies = [{"order_id": f"o{first_sequence + i}", "amount": i} for i in range(count)]
    return events(bodies, first_sequence)
