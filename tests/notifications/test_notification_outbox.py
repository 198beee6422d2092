"""The outbox sender and the poison-queue helper against a real Azurite."""

from __future__ import annotations

import base64
import json

import pytest
from azure.functions.queue import QueueMessage
from azure.storage.queue import BinaryBase64DecodePolicy
from azure.storage.queue._message_encoding import NoDecodePolicy

from shared import storage
from shared.notifications import (
    Notification,
    OutboxSender,
    Sender,
    mail_body,
    read_outbox,
    sender_from_settings,
)
from shared.poison import poison_queue_name, reject
from tests.notifications.lossy_outbox import lossy_outbox, outbox_writes

FROM = Sender("notifications@example.com")


def note(event_id: str = "order-42-shipped", **fields: object) -> Notification:
    data: dict[str, object] = {
        "event_id": event_id,
        "type": "order.shipped",
        "to": ["ada@example.com", "grace@example.org"],
        "subject": "Your order has shipped",
        "text": "It is on its way.",
    }
    data.update(fields)
    return Notification.from_data(data)


def test_each_send_is_a_new_blob(app_env: dict[str, str]) -> None:
    sender = sender_from_settings()
    assert isinstance(sender, OutboxSender)
    assert read_outbox() == []  # container not created yet
    first = sender.send(note())
    second = sender.send(note())  # a duplicate send is counted, not overwritten
    other = sender.send(note("order-43-shipped"))
    assert first.provider == "outbox" and first.message_id != second.message_id

    emails = read_outbox()
    assert sorted(e.blob_name for e in emails) == sorted(
        r.message_id for r in (first, second, other)
    )
    assert [e.event_id for e in emails].count("order-42-shipped") == 2
    assert [e.event_id for e in emails].count("order-43-shipped") == 1
    by_name = {e.blob_name: e for e in emails}
    assert by_name[first.message_id].mail == mail_body(note(), FROM)  # the exact v3 body
    assert all(e.created is not None for e in emails)
    assert [e.blob_name for e in read_outbox(event_id="order-43-shipped")] == [other.message_id]


def test_event_ids_with_odd_characters_round_trip(app_env: dict[str, str]) -> None:
    sender = OutboxSender(FROM)
    ids = ["tenant/42/shipped", "ünïcödé event", "50% off?", "a.b", "x" * 128]
    for event_id in ids:
        result = sender.send(note(event_id))
        assert result.message_id.count("/") == 1  # the id is one safe path segment
    assert sorted(e.event_id for e in read_outbox()) == sorted(ids)


def test_explicit_container(app_env: dict[str, str]) -> None:
    sender = OutboxSender(FROM, container="outbox-explicit-" + app_env["NOTIFICATIONS_QUEUE"][-10:])
    sender.send(note())
    assert read_outbox() == []
    assert len(read_outbox(sender.container)) == 1


def test_a_send_whose_answer_was_lost_is_one_email_reported_sent(app_env: dict[str, str]) -> None:
    sender, transport = lossy_outbox(FROM)
    transport.arm(outbox_writes)
    result = sender.send(note())  # landed, answer lost; the SDK's copy met BlobAlreadyExists
    assert transport.lost == 1
    [email] = read_outbox(event_id="order-42-shipped")
    assert email.blob_name == result.message_id
    assert email.mail == mail_body(note(), FROM)


def test_reject_copies_the_body_to_the_poison_queue(
    app_env: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    body = json.dumps({"secret": "personal data ada@example.com"}).encode()
    msg = QueueMessage(id="msg-1", body=body, dequeue_count=1)
    caplog.set_level("INFO")
    poison = reject(msg, "%NOTIFICATIONS_QUEUE%", "invalid notification: to: bad")
    assert (
        poison
        == app_env["NOTIFICATIONS_QUEUE"] + "-poison"
        == poison_queue_name("%NOTIFICATIONS_QUEUE%")
    )
    reject(msg, "%NOTIFICATIONS_QUEUE%", "second time: queue exists already")

    client = storage.queue_service().get_queue_client(
        poison, message_decode_policy=BinaryBase64DecodePolicy()
    )
    raw = storage.queue_service().get_queue_client(poison, message_decode_policy=NoDecodePolicy())
    # Stored with the host's base64 encoding, so the host (or a replay tool) reads the same bytes.
    assert [m.content for m in raw.peek_messages(max_messages=10)] == [
        base64.b64encode(body).decode()
    ] * 2
    messages = list(client.receive_messages(max_messages=10))
    assert [m.content for m in messages] == [body, body]
    assert "msg-1" in caplog.text and "invalid notification: to: bad" in caplog.text
    assert "personal data" not in caplog.text and "ada@example.com" not in caplog.text
