"""What makes two notifications "the same" for one event id, and the record that keeps it.

The payload is each field the recipient reads (`shared.notifications.fingerprint`); the
library keeps a hash per field and names the fields that differ. Unit tests on the in-memory
backends, then `send_notification` on Azurite: the record holds hashes, never values, and a
reused id is poisoned, naming the fields, while the first send is still in progress.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from blobsingleton import PayloadMismatch, once
from blobsingleton.config import scope_of
from blobsingleton.records import BlobRecordStore
from blobsingleton.testing import memory_backends

from functions import notifications
from shared.notifications import Notification, OutboxSender, Sender, SendResult, read_outbox
from shared.notifications.fingerprint import FIELDS, payload
from tests.notifications.test_notification_function import (
    event,
    message,
    poison_messages,
    user_function,
)


def parse(data: dict[str, Any]) -> Notification:
    return Notification.parse(json.dumps(data))


BASE = {
    "event_id": "order-42-shipped",
    "type": "order.shipped",
    "to": ["Ada@Example.com", "grace@example.org"],
    "subject": "Your order has shipped",
    "text": "It is on its way.",
}
TEMPLATED = {
    "event_id": "order-42-shipped",
    "type": "order.shipped",
    "to": ["ada@example.com"],
    "subject": "Shipped",
    "template_id": "d-123",
    "template_data": {"name": "Ada", "items": [1, 2]},
}


def mismatch(first: dict[str, Any], second: dict[str, Any]) -> tuple[str, ...] | None:
    """The fields `@once` names when `second` reuses `first`'s key; None for a duplicate."""
    with memory_backends():

        @once("email", payload=payload)
        def send(notification: Notification) -> str:
            return "sent"

        send(parse(first))
        try:
            send(parse(second))
        except PayloadMismatch as error:
            return error.fields
    return None


def test_key_order_recipient_order_and_case_make_no_difference() -> None:
    reordered = dict(reversed(list(BASE.items())))
    recipients = {**BASE, "to": ["GRACE@example.org", "ada@example.com"]}
    assert mismatch(BASE, reordered) is None and mismatch(BASE, recipients) is None
    data = {**TEMPLATED, "template_data": {"items": [1, 2], "name": "Ada"}}
    assert mismatch(TEMPLATED, data) is None


@pytest.mark.parametrize(
    ("base", "change", "fields"),
    [
        (BASE, {"subject": "Your order has shipped!"}, ("subject",)),
        (BASE, {"text": "It is on its way. "}, ("text",)),
        (BASE, {"html": "<p>It is on its way.</p>"}, ("html",)),
        (BASE, {"to": ["ada@example.com"]}, ("to",)),
        (BASE, {"type": "order.delayed"}, ("type",)),
        (BASE, {"event_id": "order-43-shipped"}, ("event_id",)),
        (BASE, {"subject": "S", "text": "T"}, ("subject", "text")),
        (TEMPLATED, {"template_data": {"name": "Ada", "items": [2, 1]}}, ("template_data",)),
        (TEMPLATED, {"template_id": "d-124"}, ("template_id",)),
    ],
)
def test_a_change_names_exactly_the_fields_that_differ(
    base: dict[str, Any], change: dict[str, Any], fields: tuple[str, ...]
) -> None:
    assert mismatch(base, {**base, **change}) == fields


# -- on Azurite ---------------------------------------------------------------------------------


def stored(body: dict[str, Any]) -> Any:
    store = BlobRecordStore(scope=scope_of(notifications._deliver_once))
    return store.get(f"email-{body['event_id']}")


def test_the_record_keeps_a_hash_per_field_and_no_value(app_env: dict[str, str]) -> None:
    body = event()
    user_function()(message(body))
    record = stored(body)
    assert record is not None and record.status == "completed"
    assert set(json.loads(record.payload_hash)) == set(FIELDS)
    raw = record.to_json().decode()
    assert "ada@example.com" not in raw and "its way" not in raw and "has shipped" not in raw


def test_a_reused_id_is_poisoned_while_the_first_send_is_in_progress(
    app_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The other message arrives while the first is being sent (its record in progress)."""
    fn = user_function()
    body = event()
    other = json.dumps({**body, "to": ["eve@example.net"]}).encode()
    outbox = OutboxSender(Sender("notifications@example.com"))

    class SlowSender:
        provider = "outbox"

        def send(self, notification: Notification) -> SendResult:
            fn(message(other, msg_id="arrived-meanwhile"))
            return outbox.send(notification)

    monkeypatch.setattr(notifications, "sender_from_settings", lambda: SlowSender())
    caplog.set_level("WARNING")
    fn(message(body))
    assert [e.event_id for e in read_outbox()] == [body["event_id"]]
    assert poison_messages(app_env) == [other]
    assert "(fields that differ: to)" in caplog.text and "eve@" not in caplog.text
    record = stored(body)
    assert record is not None and record.status == "completed"
