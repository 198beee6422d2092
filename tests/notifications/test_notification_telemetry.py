"""Notification deliveries through OpenTelemetry (`app.emails` by outcome), against Azurite:
a send, a copy deferred while it runs, a duplicate answered from the record, a failure the
host retries and a message poisoned, each counted once, as what it was."""

from __future__ import annotations

import threading

import pytest

from functions import notifications
from shared.notifications import Notification, OutboxSender, Sender, TransientEmailError
from shared.notifications.sender import SendResult
from tests.notifications.test_notification_function import event, message, unique, user_function
from tests.otel import Telemetry


class HeldSender:
    """The outbox, holding each send until released (a send in progress on one instance)."""

    def __init__(self) -> None:
        self.inside, self.release = threading.Event(), threading.Event()
        self.outbox = OutboxSender(Sender("notifications@example.com"))
        self.provider = self.outbox.provider

    def send(self, notification: Notification) -> SendResult:
        self.inside.set()
        assert self.release.wait(30)
        return self.outbox.send(notification)


class DownSender:
    provider = "sendgrid"

    def send(self, notification: Notification) -> SendResult:
        raise TransientEmailError("SendGrid unreachable (gave up after 1 attempts)", attempts=1)


def test_sent_deferred_duplicate_failed_and_rejected_are_each_counted(
    app_env: dict[str, str], telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    fn = user_function()
    held = HeldSender()
    monkeypatch.setattr(notifications, "sender_from_settings", lambda: held)
    body = event(unique("telemetry"))
    first = threading.Thread(target=fn, args=(message(body),))
    first.start()
    assert held.inside.wait(30)
    fn(message(body))  # a copy while the send runs: deferred (re-queued for later)
    held.release.set()
    first.join(30)
    fn(message(body))  # a copy after it: answered from the event's record
    monkeypatch.setattr(notifications, "sender_from_settings", lambda: DownSender())
    with pytest.raises(TransientEmailError):
        fn(message(event(unique("down"))))  # the host retries it
    fn(message(b'{"event_id": "no-recipients"}'))  # never a notification: poisoned
    assert telemetry.added_by("app.emails") == {
        (("outcome", "sent"), ("provider", "outbox")): 1,
        (("outcome", "deferred"),): 1,
        (("outcome", "duplicate"),): 1,
        (("outcome", "failed"),): 1,
        (("outcome", "rejected"),): 1,
    }
    # the outcome is on the span of the run-once call that had it (the send, the replay)
    outcomes = [
        a.get("app.email.outcome")
        for a in telemetry.attributes("once email-{notification.event_id}")
    ]
    assert "sent" in outcomes and "duplicate" in outcomes
