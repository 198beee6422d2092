"""Run-once record writes whose answer was lost, against Azurite (`_blob_records`).

The transport under the store's client is the real one, to the real Azurite, with one fault
on the next write of a record blob: the request lands and its answer is lost (the connection
reset while reading), or it never leaves while another writer gets in first. The SDK's own
retry policy then sends it again, as it does in production (after 15 s there; at once here),
and that copy meets the first one's result. The store must tell its own landed write from a
rival's, and a heartbeat must not take its own write for a takeover.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.core.pipeline.transport import RequestsTransport
from azure.storage.blob import ContainerClient, LinearRetry
from blobsingleton._blob_records import BlobRecordStore
from blobsingleton._once_handler import Decision, OnceHandler
from blobsingleton._records import Record, Status
from blobsingleton.errors import RecordConflict


class RecordWriteFaults(RequestsTransport):
    """Faults on the next `times` PUTs or DELETEs of a record blob (never the container's):

    "lost"    the request lands; its answer is lost
    "rival"   `before()` runs (another writer gets in), then the request fails unsent
    """

    def __init__(self) -> None:
        super().__init__()
        self.fault, self.left = "", 0
        self.before: Callable[[], None] | None = None
        self.methods: Counter[str] = Counter()

    def arm(self, fault: str, times: int = 1, before: Callable[[], None] | None = None) -> None:
        self.fault, self.left, self.before = fault, times, before

    def send(self, request: Any, **kwargs: Any) -> Any:
        self.methods[request.method] += 1
        writes = request.method in ("PUT", "DELETE") and "restype=container" not in request.url
        if not (writes and self.left):
            return super().send(request, **kwargs)
        self.left -= 1
        if self.fault == "rival":
            if self.before is not None:
                self.before()
            raise ServiceRequestError("connection refused (injected)")
        answer = super().send(request, **kwargs)
        answer.internal_response.close()
        raise ServiceResponseError("connection reset by peer (injected)")


@pytest.fixture
def container_name(storage_env: str) -> str:
    return f"lost-{uuid.uuid4().hex[:10]}"


def store_over(container_name: str, transport: RequestsTransport | None = None) -> BlobRecordStore:
    """A record store whose client retries at once (the SDK's default waits 15 s first)."""
    options: dict[str, Any] = {"retry_policy": LinearRetry(backoff=0, random_jitter_range=0)}
    if transport is not None:
        options["transport"] = transport
    client = ContainerClient.from_connection_string(
        os.environ["AzureWebJobsStorage"], container_name, **options
    )
    return BlobRecordStore(container=client, namespace="lost")


def claim(key: str, owner: str = "me") -> Record:
    return Record(key=key, status=Status.IN_PROGRESS, started_at=1.0, expires_at=2.0,
                  owner=owner, ttl=60.0)  # fmt: skip


def test_a_claim_whose_answer_was_lost_is_known_as_ours(container_name: str) -> None:
    transport = RecordWriteFaults()
    store = store_over(container_name, transport)
    store.put_if_absent(claim("warmup"))  # the container exists: only the record PUT is faulted
    transport.arm("lost")
    written = store.put_if_absent(claim("k"))  # sent twice: the second copy met BlobAlreadyExists
    stored = store_over(container_name).get("k")
    assert stored is not None and stored.owner == "me"
    assert written.etag == stored.etag  # the etag the next write of this claim needs


def test_a_heartbeat_whose_answer_was_lost_goes_on_from_its_own_write(container_name: str) -> None:
    transport = RecordWriteFaults()
    store = store_over(container_name, transport)
    first = store.put_if_absent(claim("k"))
    transport.arm("lost")
    beat = store.replace(first.with_(expires_at=3.0), first.etag or "")  # the copy met 412
    again = store.replace(beat.with_(expires_at=4.0), beat.etag or "")  # from the right etag
    stored = store_over(container_name).get("k")
    assert stored is not None and (stored.expires_at, stored.etag) == (4.0, again.etag)


def test_a_free_whose_answer_was_lost_is_done(container_name: str) -> None:
    transport = RecordWriteFaults()
    store = store_over(container_name, transport)
    first = store.put_if_absent(claim("k"))
    transport.arm("lost")
    store.delete("k", first.etag or "")  # the copy met BlobNotFound
    assert store_over(container_name).get("k") is None


def test_a_rivals_write_between_the_attempts_is_still_a_conflict(container_name: str) -> None:
    transport = RecordWriteFaults()
    store, rival = store_over(container_name, transport), store_over(container_name)
    store.put_if_absent(claim("warmup"))
    transport.arm("rival", before=lambda: rival.put_if_absent(claim("k", owner="rival")))
    with pytest.raises(RecordConflict):
        store.put_if_absent(claim("k"))
    first = rival.get("k")
    assert first is not None and first.owner == "rival"
    transport.arm("rival", before=lambda: rival.replace(claim("k", "rival"), first.etag or ""))
    with pytest.raises(RecordConflict):
        store.replace(claim("k"), first.etag or "")
    stored = rival.get("k")
    assert stored is not None and stored.owner == "rival"


def test_a_conflict_at_the_first_attempt_costs_no_read_back(container_name: str) -> None:
    transport = RecordWriteFaults()
    store, rival = store_over(container_name, transport), store_over(container_name)
    rival.put_if_absent(claim("k", owner="rival"))
    store.put_if_absent(claim("warmup"))
    transport.methods.clear()
    with pytest.raises(RecordConflict):
        store.put_if_absent(claim("k"))
    assert transport.methods == {"PUT": 1}


def test_a_run_whose_heartbeat_answer_was_lost_still_owns_its_key_and_completes_once(
    container_name: str,
) -> None:
    transport = RecordWriteFaults()
    store = store_over(container_name, transport)
    store.put_if_absent(claim("warmup"))
    run = OnceHandler(store, "job", in_progress_timeout=60.0)
    assert run.begin().decision == Decision.EXECUTE
    transport.arm("lost")
    assert run._beat_step()  # one heartbeat, its answer lost
    assert not run.lost.is_set()
    run.ensure_held()  # a side effect may go ahead: the key is still this run's
    run.complete("sent")
    duplicate = OnceHandler(store_over(container_name), "job", in_progress_timeout=60.0)
    outcome = duplicate.begin()
    assert outcome.decision == Decision.STORED and outcome.record.result == "sent"
