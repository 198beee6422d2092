"""`send_notification` as the worker indexes it, called with real QueueMessages on Azurite.

Uses the outbox (no SENDGRID_API_KEY) to count emails, and Prism for the SendGrid paths.
`azure.functions.queue.QueueMessage` is the worker's own message type (a `func.QueueMessage`
that also carries `dequeue_count`).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.functions.queue import QueueMessage
from azure.storage.queue import BinaryBase64DecodePolicy

import function_app
from functions import notifications
from shared import storage
from shared.notifications import (
    Notification,
    RetryPolicy,
    Sender,
    SendGridSender,
    TransientEmailError,
    read_outbox,
)
from tests.notifications.lossy_outbox import lossy_outbox, outbox_writes
from tests.support import fresh_functions

FAST = RetryPolicy(max_attempts=2, base_delay=0.01, max_delay=0.01)


def user_function() -> Callable[[QueueMessage], Any]:
    functions = fresh_functions(function_app.app)
    trigger = functions["send_notification"].get_trigger().get_dict_repr()
    assert trigger["type"] == "queueTrigger"
    assert trigger["queueName"] == "%NOTIFICATIONS_QUEUE%"
    assert trigger["connection"] == "AzureWebJobsStorage"
    fn = functions["send_notification"].get_user_function()

    def invoked(msg: QueueMessage) -> Any:  # as the worker runs it
        return fn(msg)

    return invoked


def message(body: dict[str, Any] | bytes, *, msg_id: str | None = None) -> QueueMessage:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return QueueMessage(id=msg_id or str(uuid.uuid4()), body=raw, dequeue_count=1)


def unique(prefix: str) -> str:
    # The run-once store is bound when `deliver` first runs (to that test's settings), so
    # tests keep apart by event id rather than by container.
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def event(event_id: str | None = None, **fields: Any) -> dict[str, Any]:
    data = {
        "event_id": event_id or unique("order-shipped"),
        "type": "order.shipped",
        "to": ["ada@example.com", "grace@example.org"],
        "subject": "Your order has shipped",
        "text": "It is on its way.",
    }
    data.update(fields)
    return data


def queue_messages(name: str) -> list[bytes]:
    client = storage.queue_service().get_queue_client(
        name, message_decode_policy=BinaryBase64DecodePolicy()
    )
    try:
        return [m.content for m in client.peek_messages(max_messages=32)]
    except ResourceNotFoundError:  # the queue does not exist yet
        return []


def poison_messages(env: dict[str, str]) -> list[bytes]:
    return queue_messages(env["NOTIFICATIONS_QUEUE"] + "-poison")


def use_sender(monkeypatch: pytest.MonkeyPatch, sender: SendGridSender) -> None:
    monkeypatch.setattr(notifications, "sender_from_settings", lambda: sender)


# -- outbox mode ---------------------------------------------------------------------------------


def test_sends_one_email_however_often_the_event_arrives(app_env: dict[str, str]) -> None:
    fn = user_function()
    body = event()
    first = message(body)
    assert fn(first) is None
    fn(first)  # the same message delivered again (e.g. its completion was lost)
    fn(message(body))  # the same event enqueued twice
    emails = read_outbox()
    assert [e.event_id for e in emails] == [body["event_id"]]
    assert [p["to"] for p in emails[0].mail["personalizations"]] == [
        [{"email": "ada@example.com"}],
        [{"email": "grace@example.org"}],
    ]
    assert poison_messages(app_env) == []


def test_an_email_whose_outbox_answer_was_lost_is_sent_once(
    app_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sender, transport = lossy_outbox(Sender("notifications@example.com"))
    monkeypatch.setattr(notifications, "sender_from_settings", lambda: sender)
    fn = user_function()
    body = event()
    transport.arm(outbox_writes)
    assert fn(message(body)) is None  # the delivery completes: not retried by the host
    assert transport.lost == 1
    fn(message(body))  # a later copy of the event finds it sent
    assert [e.event_id for e in read_outbox()] == [body["event_id"]]
    assert poison_messages(app_env) == []


def test_distinct_events_each_send(app_env: dict[str, str]) -> None:
    fn = user_function()
    ids = sorted(unique(f"event-{n}") for n in range(3))
    for event_id in ids:
        fn(message(event(event_id)))
    assert sorted(e.event_id for e in read_outbox()) == ids


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        json.dumps(event(to="not-an-address")).encode(),
        json.dumps(event(event_id="../x")).encode(),
        json.dumps(event(**{"from": "ceo@example.com"})).encode(),
    ],
    ids=["not-json", "bad-address", "traversal-id", "from-override"],
)
def test_invalid_message_goes_to_poison_at_once(
    app_env: dict[str, str], body: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    msg = message(body, msg_id="bad-msg-1")
    caplog.set_level("WARNING")
    assert user_function()(msg) is None  # completes: no retries burnt on it
    assert poison_messages(app_env) == [body]
    assert read_outbox() == []
    assert "bad-msg-1" in caplog.text and "invalid notification" in caplog.text


def test_event_id_reused_for_another_notification_goes_to_poison(
    app_env: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    fn = user_function()
    body = event()
    fn(message(body))
    other = json.dumps({**body, "type": "invoice.paid"}).encode()
    caplog.set_level("WARNING")
    fn(message(other))
    assert len(read_outbox()) == 1
    assert poison_messages(app_env) == [other]
    assert "different content (fields that differ: type)" in caplog.text


def test_a_reused_id_with_another_subject_or_body_is_poisoned_not_dropped(
    app_env: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 23: the same id and recipients with another subject, then another body: both
    poisoned with the fields named (never their values), one email in all."""
    fn = user_function()
    body = event()
    fn(message(body))
    new_subject = json.dumps({**body, "subject": "Refund of EUR 1,200 issued"}).encode()
    new_body = json.dumps({**body, "text": "Your diagnosis letter is attached."}).encode()
    caplog.set_level("WARNING")
    fn(message(new_subject, msg_id="subject-msg"))
    fn(message(new_body, msg_id="body-msg"))
    fn(message(body))  # the original again: still a plain duplicate
    assert len(read_outbox()) == 1
    assert poison_messages(app_env) == [new_subject, new_body]
    reasons = [r.getMessage() for r in caplog.records if "moved to" in r.getMessage()]
    assert len(reasons) == 2
    assert "subject-msg" in reasons[0] and "(fields that differ: subject)" in reasons[0]
    assert "body-msg" in reasons[1] and "(fields that differ: text)" in reasons[1]
    for secret in ("Refund", "EUR", "diagnosis", "on its way", "ada@example.com", "grace@"):
        assert secret not in caplog.text


def test_concurrent_deliveries_send_once(app_env: dict[str, str]) -> None:
    """Eight "instances" get the same event at once: one email; the others defer or skip."""
    fn = user_function()
    storage.queue_client(app_env["NOTIFICATIONS_QUEUE"]).create_queue()  # the trigger's queue
    body = json.dumps(event(unique("concurrent"))).encode()
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def instance() -> None:
        barrier.wait()
        try:
            fn(message(body))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=instance) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert len(read_outbox()) == 1

    # Deliver what was deferred (visible after the defer delay): still one email.
    client = storage.queue_service().get_queue_client(
        app_env["NOTIFICATIONS_QUEUE"], message_decode_policy=BinaryBase64DecodePolicy()
    )
    try:
        deferred = client.get_queue_properties().approximate_message_count
    except ResourceNotFoundError:
        deferred = 0  # every other delivery came after the send and found it done
    handled = 0
    deadline = time.monotonic() + 30
    while handled < deferred and time.monotonic() < deadline:
        for m in client.receive_messages(max_messages=32, visibility_timeout=30):
            fn(QueueMessage(id=m.id, body=m.content, dequeue_count=m.dequeue_count))
            client.delete_message(m)
            handled += 1
        time.sleep(0.2)
    assert handled == deferred <= 7
    assert len(read_outbox()) == 1
    assert poison_messages(app_env) == []


# -- SendGrid mode (Prism) -----------------------------------------------------------------------


def test_sendgrid_from_settings(
    app_env: dict[str, str], sendgrid_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SENDGRID_API_KEY", "SG.test-key")
    monkeypatch.setenv("SENDGRID_HOST", sendgrid_url)
    msg = message(event(unique("sg")))
    user_function()(msg)
    # The run-once record holds the send's result; a second call returns it without sending.
    stored = notifications.deliver(Notification.parse(msg.get_body()), msg)
    assert stored == {"provider": "sendgrid", "message_id": None, "attempts": 1, "status": 202}
    assert read_outbox() == []


def test_refused_email_goes_to_poison_and_frees_the_key(
    app_env: dict[str, str], sendgrid_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sender = SendGridSender("SG.k", Sender("n@example.com"), host=sendgrid_url, retry=FAST)
    sender.client.client.request_headers["Prefer"] = "code=400"
    use_sender(monkeypatch, sender)
    msg = message(event(unique("sg-400")))
    user_function()(msg)
    assert poison_messages(app_env) == [msg.get_body()]
    # Replayed from poison after the cause is fixed, it sends: the failure freed the key.
    sender.client.client.request_headers.pop("Prefer")
    stored = notifications.deliver(Notification.parse(msg.get_body()), msg)
    assert stored["status"] == 202


def test_transient_failure_raises_for_a_host_retry(
    app_env: dict[str, str], sendgrid_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sender = SendGridSender(
        "SG.k", Sender("n@example.com"), host=sendgrid_url, retry=FAST, sleep=lambda s: None
    )
    sender.client.client.request_headers["Prefer"] = "code=500"
    use_sender(monkeypatch, sender)
    msg = message(event(unique("sg-500")))
    with pytest.raises(TransientEmailError) as info:
        user_function()(msg)
    assert info.value.attempts == 2
    assert poison_messages(app_env) == []
    sender.client.client.request_headers.pop("Prefer")
    user_function()(msg)  # the host's retry: the key was freed, so this one sends
    stored = notifications.deliver(Notification.parse(msg.get_body()), msg)
    assert stored["status"] == 202 and stored["provider"] == "sendgrid"
