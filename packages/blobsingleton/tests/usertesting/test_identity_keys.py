"""A key can never name less than its item's identity (issue 48, item 1): an Event Hubs sequence
number is unique only within its partition, so however it is spelt (the binding-data name, the
Python property, a path through the event or its metadata, a batch item in `fn.each`) a key
without the partition is refused, naming what to add; a key with it runs two events of equal
sequence numbers from two partitions both. Events come from the test kit's builders, which
decode host-shaped data with azure-functions' own converter. In memory: no storage."""

from __future__ import annotations

import json
from typing import Any

import azure.functions as func
import pytest
from blobsingleton import once
from blobsingleton.errors import BatchFailed, KeyTemplateError
from blobsingleton.testing import (
    cosmos_documents,
    event_hub_event,
    event_hub_events,
    memory_backends,
)

#: What the refusal must name: the partition, spelt as a binding-data name and as a path.
ADD_THE_PARTITION = r"only within its partition.*add \{PartitionId\}"


def _two_partitions() -> list[func.EventHubEvent]:
    """Two events with one sequence number (7), from partitions 2 and 3."""
    return [
        event_hub_event({"order_id": "from-2"}, sequence_number=7, partition_id="2"),
        event_hub_event({"order_id": "from-3"}, sequence_number=7, partition_id="3"),
    ]


@pytest.mark.parametrize(
    "template",
    [
        "charge-{PartitionId}-{event.sequence_number}",
        "charge-{event.metadata.PartitionContext.PartitionId}-{event.sequence_number}",
        "charge-{partition_id}-{SequenceNumber}",
    ],
)
def test_equal_sequence_numbers_of_two_partitions_both_run(template: str) -> None:
    ran: list[str] = []

    @once(template)
    def charge(event: func.EventHubEvent) -> str:
        order = json.loads(event.get_body())["order_id"]
        ran.append(order)
        return order

    with memory_backends():
        first, second = _two_partitions()
        assert [charge(first), charge(second)] == ["from-2", "from-3"]
        assert charge(first) == "from-2"  # a replay of partition 2's own: not run again
    assert ran == ["from-2", "from-3"]


def test_a_batch_of_each_partition_runs_every_item() -> None:
    ran: list[tuple[str, int | None]] = []

    @once("charge-{PartitionId}-{event.sequence_number}")
    def charge(event: func.EventHubEvent) -> int | None:
        ran.append((json.loads(event.get_body())["p"], event.sequence_number))
        return event.sequence_number

    with memory_backends():
        for partition in ("2", "3"):  # the same sequence numbers, 10 and 11, in each
            batch = event_hub_events(
                [{"p": partition}, {"p": partition}], first_sequence_number=10,
                partition_id=partition,
            )  # fmt: skip
            result = charge.each(batch)
            assert result.counts() == {"ran": 2}
            assert [r.key for r in result] == [f"charge-{partition}-10", f"charge-{partition}-11"]
        assert charge.each(batch).counts() == {"replayed": 2}
    assert ran == [("2", 10), ("2", 11), ("3", 10), ("3", 11)]


def test_one_batch_holding_both_partitions_runs_both() -> None:
    ran: list[str] = []

    @once("charge-{PartitionId}-{event.sequence_number}")
    def charge(event: func.EventHubEvent) -> str:
        ran.append(json.loads(event.get_body())["order_id"])
        return ran[-1]

    with memory_backends():
        result = charge.each(_two_partitions())
        assert [r.outcome for r in result] == ["ran", "ran"]
        assert [r.key for r in result] == ["charge-2-7", "charge-3-7"]
        assert charge.each(_two_partitions()).values() == ["from-2", "from-3"]  # replayed
    assert ran == ["from-2", "from-3"]


@pytest.mark.parametrize(
    "template",
    ["charge-{event.sequence_number}", "charge-{event.offset}", "charge-{event.metadata.Offset}"],
)
def test_a_path_through_an_annotated_event_without_its_partition_is_refused_when_decorated(
    template: str,
) -> None:
    with pytest.raises(KeyTemplateError, match=ADD_THE_PARTITION) as raised:

        @once(template)
        def charge(event: func.EventHubEvent) -> None: ...

    assert "{event.metadata.PartitionContext.PartitionId}" in str(raised.value)


def test_without_an_annotation_it_is_refused_at_the_call_before_anything_runs() -> None:
    ran: list[int | None] = []

    @once("charge-{event.sequence_number}")
    def charge(event: Any) -> None:
        ran.append(event.sequence_number)

    with memory_backends() as memory:
        for event in _two_partitions():
            with pytest.raises(KeyTemplateError, match=ADD_THE_PARTITION):
                charge(event)
        with pytest.raises(KeyTemplateError, match=ADD_THE_PARTITION):
            charge(_two_partitions()[0])  # the bare name too: {SequenceNumber} alone
        result = charge.each(_two_partitions())
        assert [r.outcome for r in result] == ["failed", "failed"]
        assert all(isinstance(r.error, KeyTemplateError) for r in result)
        with pytest.raises(BatchFailed):
            result.raise_if_failed()
        assert memory.records_of(charge).records == {}  # nothing claimed
    assert ran == []


def test_the_bare_sequence_number_alone_is_refused_at_the_call() -> None:
    @once("charge-{SequenceNumber}")
    def charge(event: func.EventHubEvent) -> None: ...

    with memory_backends(), pytest.raises(KeyTemplateError, match=ADD_THE_PARTITION):
        charge(_two_partitions()[0])


def test_a_body_field_of_that_name_is_the_apps_own() -> None:
    """A JSON body's `sequence_number` is the sender's field (body before identity): taken."""

    @once("charge-{sequence_number}")
    def charge(event: func.EventHubEvent) -> int:
        return int(json.loads(event.get_body())["sequence_number"])

    with memory_backends():
        event = event_hub_event({"sequence_number": 41}, sequence_number=7, partition_id="2")
        assert charge(event) == 41


def test_a_cosmos_db_lsn_needs_the_documents_id() -> None:
    @once("sync-{_lsn}")
    def sync(document: func.Document) -> None: ...

    @once("sync-{id}-{_lsn}")
    def sync_change(document: func.Document) -> str:
        return str(document["id"])

    with memory_backends():
        documents = cosmos_documents([{"id": "a"}, {"id": "b"}], first_lsn=5)
        refused = r"partition key range.*add the document's \{id\}"
        with pytest.raises(KeyTemplateError, match=refused):
            sync(documents[0])
        assert sync_change.each(documents).values() == ["a", "b"]
