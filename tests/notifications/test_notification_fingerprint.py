"""The per-field content fingerprint of a notification, and the run-once records that keep it.

Unit tests of the format, then `send_notification` on Azurite: the composite stored in the
record, a reused id poisoned while the first send is still in progress, and records written
by the two earlier releases (their fingerprints copied below as they were) still honoured.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import pytest
from blobsingleton import once
from blobsingleton.records import BlobRecordStore, Record, Status

from functions import notifications
from shared import storage
from shared.notifications import Notification, OutboxSender, Sender, SendResult, read_outbox
from shared.notifications.fingerprint import (
    FIELDS,
    UNKNOWN,
    differing_fields,
    fingerprint,
    legacy_payload_hashes,
    parse_fingerprint,
)
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


# -- the format --------------------------------------------------------------------------------


def test_the_fingerprint_hashes_every_field_and_holds_no_value() -> None:
    composite = fingerprint(parse(BASE))
    hashes = parse_fingerprint(composite)
    assert hashes is not None and list(hashes) == list(FIELDS)
    assert all(len(h) == 32 and int(h, 16) >= 0 for h in hashes.values())
    for value in ("ada@example.com", "example.org", "order-42", "order.shipped", "its way"):
        assert value not in composite.lower()


def test_key_order_recipient_order_and_case_do_not_change_it() -> None:
    reordered = dict(reversed(list(BASE.items())))
    recipients = {**BASE, "to": ["GRACE@example.org", "ada@example.com"]}
    assert (
        fingerprint(parse(BASE)) == fingerprint(parse(reordered)) == fingerprint(parse(recipients))
    )
    data = {**TEMPLATED, "template_data": {"items": [1, 2], "name": "Ada"}}
    assert fingerprint(parse(TEMPLATED)) == fingerprint(parse(data))


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
    first, second = fingerprint(parse(base)), fingerprint(parse({**base, **change}))
    assert first != second
    assert differing_fields(first, second) == fields
    assert differing_fields(first, first) == ()


def test_an_older_format_is_reported_as_unknown_fields() -> None:
    assert differing_fields("ab" * 32, fingerprint(parse(BASE))) == UNKNOWN
    assert parse_fingerprint("ab" * 32) is None
    assert parse_fingerprint("v2:subject") is None


# -- the earlier releases' fingerprints, as they were written ----------------------------------


def identity_fingerprint(n: Notification) -> str:
    """Release of 23 Nov 2026 (dbe970a): event id, type, recipients, template."""
    identity = {
        "event_id": n.event_id,
        "type": n.type,
        "to": sorted(address.lower() for address in n.to),
        "template_id": n.template_id,
    }
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def content_fingerprint(n: Notification) -> str:
    """The first release (0e2cd5a): every field."""
    canonical = json.dumps(n.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def write_old_record(body: dict[str, Any], old_fingerprint: Any) -> str:
    """Send `body` the way an earlier release did: a completed record with its payload hash."""

    @once("email-{notification.event_id}", payload=lambda n, msg: old_fingerprint(n))
    def deliver(notification: Notification, msg: Any) -> dict[str, Any]:
        return SendResult("outbox", "sent-by-the-old-release").to_dict()

    deliver(parse(body), message(body))
    record = BlobRecordStore().get(f"email-{body['event_id']}")
    assert record is not None and record.payload_hash is not None
    assert len(record.payload_hash) == 64 and parse_fingerprint(record.payload_hash) is None
    assert record.payload_hash in legacy_payload_hashes(parse(body))
    return record.payload_hash


def test_a_record_of_the_identity_fingerprint_is_still_honoured(
    app_env: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    fn = user_function()
    body = event()
    stored = write_old_record(body, identity_fingerprint)
    rerendered = json.dumps({**body, "subject": "Re-rendered", "text": "Duration: 9.9 s"})
    fn(message(rerendered.encode()))  # same old-format fingerprint: a duplicate
    fn(message(body))
    assert read_outbox() == [] and poison_messages(app_env) == []
    other_type = json.dumps({**body, "type": "invoice.paid"}).encode()
    caplog.set_level("WARNING")
    fn(message(other_type))  # another old-format fingerprint: poisoned, fields unknown
    assert poison_messages(app_env) == [other_type]
    assert "fields that differ: unknown" in caplog.text
    assert read_outbox() == []
    record = BlobRecordStore().get(f"email-{body['event_id']}")
    assert record is not None and record.payload_hash == stored  # left as it was


def test_a_record_of_the_first_content_fingerprint_is_still_honoured(
    app_env: dict[str, str],
) -> None:
    fn = user_function()
    body = event()
    write_old_record(body, content_fingerprint)
    fn(message(body))
    assert read_outbox() == [] and poison_messages(app_env) == []
    other = json.dumps({**body, "subject": "Another"}).encode()
    fn(message(other))
    assert poison_messages(app_env) == [other] and read_outbox() == []


def test_an_older_in_progress_record_defers_its_duplicates_and_poisons_the_rest(
    app_env: dict[str, str],
) -> None:
    """An earlier release's send still running at the upgrade: a copy waits for it."""
    fn = user_function()
    body = event()
    legacy = hashlib.sha256(identity_fingerprint(parse(body)).encode()).hexdigest()
    now = time.time()
    old = Record(key=f"email-{body['event_id']}", status=Status.IN_PROGRESS, started_at=now,
                 expires_at=now + 60, payload_hash=legacy, owner="old-release")  # fmt: skip
    BlobRecordStore().put_if_absent(old)
    copy = json.dumps({**body, "subject": "Rendered by the new release"}).encode()
    fn(message(copy))
    deferred = storage.queue_client(app_env["NOTIFICATIONS_QUEUE"]).get_queue_properties()
    assert deferred.approximate_message_count == 1  # re-enqueued (invisible for now)
    assert poison_messages(app_env) == [] and read_outbox() == []
    other = json.dumps({**body, "to": ["eve@example.net"]}).encode()
    fn(message(other))
    assert poison_messages(app_env) == [other] and read_outbox() == []


# -- on Azurite ---------------------------------------------------------------------------------


def test_the_record_keeps_the_composite_and_no_value(app_env: dict[str, str]) -> None:
    body = event()
    user_function()(message(body))
    record = BlobRecordStore().get(f"email-{body['event_id']}")
    assert record is not None and record.status == "completed"
    assert record.payload_hash == fingerprint(parse(body))
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
    record = BlobRecordStore().get(f"email-{body['event_id']}")
    assert record is not None and record.payload_hash == fingerprint(parse(body))
