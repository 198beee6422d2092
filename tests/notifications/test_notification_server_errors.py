"""The notification flow when storage answers as Azure does under load (`server_errors`: a
proxy in front of Azurite answering chosen requests 503 ServerBusy unforwarded, or 500
OperationTimedOut / InternalError after they landed).

An answer that says "failed" or "unknown" must not be taken as "did not happen": an outbox
write that landed is one email, not a failed send sent again; a claim known as ours only
after its record could have expired sends nothing.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from azure.functions.queue import QueueMessage
from azure.storage.blob import BlobServiceClient
from blobsingleton.errors import RunLost

from functions import notifications
from harness.http_messages import Message
from shared.notifications import Notification, read_outbox, write_outbox
from tests.conftest import ServerErrors
from tests.support import writes_to


def _create_container(direct: str, name: str) -> None:
    """Create a container straight on Azurite (not through the proxy, nothing armed hits it)."""
    BlobServiceClient.from_connection_string(direct).create_container(name)


def _deliver(event_id: str) -> object:
    """One delivery of the event's message, as the queue trigger hands it to the function."""
    body = {"event_id": event_id, "type": "order.shipped", "to": ["ada@example.com"],
            "subject": "Shipped", "text": "On its way."}  # fmt: skip
    raw = json.dumps(body).encode()
    msg = QueueMessage(id=str(uuid.uuid4()), body=raw, dequeue_count=1)
    return notifications.deliver(Notification.parse(raw), msg)


@pytest.mark.parametrize("kind", ["operation_timed_out", "internal_error", "server_busy"])
def test_an_outbox_write_storage_answered_with_an_error_is_one_email(
    server_errors: ServerErrors, app_env: dict[str, str], storage_env: str, kind: str
) -> None:
    _create_container(storage_env, app_env["EMAIL_OUTBOX_CONTAINER"])
    event_id = f"evt-{uuid.uuid4().hex[:8]}"
    server_errors.blob.arm(kind, writes_to(".json"))
    name = write_outbox(event_id, {"subject": "Shipped"})
    assert server_errors.blob.armed() == 0  # the write was answered with the error
    assert [e.blob_name for e in read_outbox(event_id=event_id)] == [name]


def test_a_claim_known_as_ours_only_after_it_could_expire_sends_nothing(
    server_errors: ServerErrors, app_env: dict[str, str], storage_env: str
) -> None:
    _create_container(storage_env, app_env["RUNONCE_CONTAINER"])
    _create_container(storage_env, app_env["EMAIL_OUTBOX_CONTAINER"])
    event_id = f"evt-{uuid.uuid4().hex[:8]}"
    # The record is created; storage's 500 comes back after the in-progress timeout (5 s in
    # the tests): the SDK sends it again, meets its own record, and the store knows it as ours.
    late = notifications.IN_PROGRESS_SECONDS + 1.0
    server_errors.blob.arm("operation_timed_out", writes_to(f"email-{event_id}"), delay=late)
    with pytest.raises(RunLost):
        _deliver(event_id)
    assert server_errors.blob.armed() == 0
    assert read_outbox(event_id=event_id) == []  # nothing sent by the stale claim
    _deliver(event_id)  # the host's retry: the key was freed
    assert len(read_outbox(event_id=event_id)) == 1


def test_a_completion_answered_503_is_written_while_its_record_still_lives(
    server_errors: ServerErrors, app_env: dict[str, str], storage_env: str
) -> None:
    _create_container(storage_env, app_env["RUNONCE_CONTAINER"])
    _create_container(storage_env, app_env["EMAIL_OUTBOX_CONTAINER"])
    event_id = f"evt-{uuid.uuid4().hex[:8]}"

    def completion(request: Message) -> bool:  # the replace of the claim, If-Match its etag
        return writes_to(f"email-{event_id}")(request) and request.header("If-Match") is not None

    server_errors.blob.arm("server_busy", completion)
    began = time.monotonic()
    _deliver(event_id)
    took = time.monotonic() - began
    assert server_errors.blob.armed() == 0
    # The SDK's default policy sent it again 15-21 s later, after the record (its last write
    # the claim) had expired and another delivery could take the event over.
    assert took < notifications.IN_PROGRESS_SECONDS, took
    _deliver(event_id)  # a copy: the stored result
    assert len(read_outbox(event_id=event_id)) == 1
