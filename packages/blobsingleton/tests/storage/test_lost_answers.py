"""Run-once writes whose answer says "failed" or says nothing, against Azurite.

Azure Storage answers `503 ServerBusy` when it did not carry a request out, and `500
OperationTimedOut` when it may or may not have; a connection can also break after the request
landed. The transport under the store's client (`libsupport.StorageFaults`) does each of these
to the real Azurite, and the SDK's own retry policy sends the request again, as it does in
production (after seconds there; at once here), so a write that landed meets its own first
copy as a conflict. A run must find out: its claim, heartbeat, completion and free are known as
its own by the record's claim id, a rival's write is still a conflict, and a completion that
storage keeps refusing is tried again while the claim can still be alive, so that no duplicate
takes over work that ran.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
from azure.storage.blob import ContainerClient, LinearRetry
from blobsingleton._once_handler import Decision, OnceHandler
from blobsingleton.errors import StorageUnavailable
from blobsingleton.records import BlobRecordStore, Record, Status
from libsupport import StorageFaults

LANDED = ["500", "reset"]  # the write landed; the answer said it failed, or nothing at all


@pytest.fixture
def container_name(storage_env: str) -> str:
    return f"lost-{uuid.uuid4().hex[:10]}"


def store_over(
    container_name: str, transport: StorageFaults | None = None, retries: int = 3
) -> BlobRecordStore:
    """A record store whose client retries at once (the SDK's default waits seconds first)."""
    options: dict[str, Any] = {
        "retry_policy": LinearRetry(backoff=0, random_jitter_range=0, retry_total=retries)
    }
    if transport is not None:
        options["transport"] = transport
    client = ContainerClient.from_connection_string(
        os.environ["AzureWebJobsStorage"], container_name, **options
    )
    return BlobRecordStore(container=client, namespace="lost")


def faulty(container_name: str, retries: int = 3) -> tuple[BlobRecordStore, StorageFaults]:
    transport = StorageFaults()
    store = store_over(container_name, transport, retries)
    store.put_if_absent(  # the container exists: only record writes are faulted from here
        Record(key="warmup", status=Status.COMPLETED, started_at=1, expires_at=2, ttl=60)
    )
    return store, transport


def run(store: BlobRecordStore, key: str = "job") -> OnceHandler:
    handler = OnceHandler(store, key, in_progress_timeout=60.0)
    handler._start_beating = lambda: None  # type: ignore[method-assign]  # the test beats
    return handler


def duplicate(container_name: str, key: str = "job") -> Any:
    return run(store_over(container_name), key).begin()


@pytest.mark.parametrize("fault", LANDED)
def test_a_claim_whose_answer_was_lost_is_this_runs_own(container_name: str, fault: str) -> None:
    store, transport = faulty(container_name)
    transport.arm(fault)
    claimed = run(store).begin()  # the create landed; its copy met BlobAlreadyExists
    assert claimed.decision == Decision.EXECUTE
    stored = store_over(container_name).get("job")
    assert stored is not None and claimed.record.etag == stored.etag  # the next write's etag
    assert duplicate(container_name).decision == Decision.BUSY


@pytest.mark.parametrize("fault", LANDED)
def test_a_heartbeat_whose_answer_was_lost_keeps_the_key_and_the_run_completes_once(
    container_name: str, fault: str
) -> None:
    store, transport = faulty(container_name)
    handler = run(store)
    assert handler.begin().decision == Decision.EXECUTE
    transport.arm(fault)
    assert handler._beat_step()  # one heartbeat, its answer lost: the copy met 412
    assert not handler.lost.is_set()
    handler.ensure_held()  # a side effect may go ahead: the key is still this run's
    assert handler._beat_step()  # the next beat goes on from the landed one's etag
    handler.complete("sent")
    outcome = duplicate(container_name)
    assert outcome.decision == Decision.STORED and outcome.record.result == "sent"


@pytest.mark.parametrize("fault", LANDED)
def test_a_completion_whose_answer_was_lost_is_done(container_name: str, fault: str) -> None:
    store, transport = faulty(container_name)
    handler = run(store)
    assert handler.begin().decision == Decision.EXECUTE
    transport.arm(fault)
    handler.complete("sent")  # landed; its copy met 412: read back, ours, completed
    outcome = duplicate(container_name)
    assert outcome.decision == Decision.STORED and outcome.record.result == "sent"


def test_a_completion_storage_kept_refusing_is_sent_again_while_the_claim_lives(
    container_name: str,
) -> None:
    store, transport = faulty(container_name, retries=1)
    handler = run(store)
    assert handler.begin().decision == Decision.EXECUTE
    transport.arm("503", times=3)  # the SDK's try and retry both refused, then once more
    handler.complete("sent")
    outcome = duplicate(container_name)
    assert outcome.decision == Decision.STORED and outcome.record.result == "sent"


def test_a_completion_that_never_lands_is_raised_not_taken_for_done(container_name: str) -> None:
    store, transport = faulty(container_name, retries=0)
    handler = run(store)
    assert handler.begin().decision == Decision.EXECUTE
    transport.arm("503", times=100)
    with pytest.raises(StorageUnavailable):
        handler.complete("sent")
    assert duplicate(container_name).decision == Decision.BUSY  # still this run's claim


@pytest.mark.parametrize("fault", LANDED)
def test_a_free_whose_answer_was_lost_is_done(container_name: str, fault: str) -> None:
    store, transport = faulty(container_name)
    handler = run(store)
    assert handler.begin().decision == Decision.EXECUTE
    transport.arm(fault)
    handler.fail()  # the delete landed; its copy met BlobNotFound
    assert store_over(container_name).get("job") is None
    assert duplicate(container_name).decision == Decision.EXECUTE


def test_a_refused_claim_is_sent_again_by_the_client(container_name: str) -> None:
    store, transport = faulty(container_name)
    transport.arm("503")  # not carried out: the SDK's retry creates it
    assert run(store).begin().decision == Decision.EXECUTE


def test_a_rivals_write_between_the_attempts_is_still_a_conflict(container_name: str) -> None:
    store, transport = faulty(container_name)
    rival = run(store_over(container_name))
    transport.arm("rival", before=lambda: rival.begin())
    outcome = run(store).begin()
    assert outcome.decision == Decision.BUSY  # the rival's claim, not ours
    assert outcome.record.claim == rival._claim_id
    rival._beat_step()
    rival.complete("the rival's")
    assert duplicate(container_name).record.result == "the rival's"


def test_a_conflict_at_the_first_attempt_costs_one_read(container_name: str) -> None:
    store, transport = faulty(container_name)
    rival = run(store_over(container_name))
    assert rival.begin().decision == Decision.EXECUTE
    transport.methods.clear()
    assert run(store).begin().decision == Decision.BUSY
    assert transport.methods == {"PUT": 1, "GET": 1}  # the create, then what is there
