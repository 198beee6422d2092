"""Event notification emails: each event is emailed once, however many instances see it.

A queue message (see `shared.notifications.message`) becomes one send, guarded by
`@once("email-{notification.event_id}")`: a duplicate of an event already sent completes
without sending, a duplicate arriving while another instance is sending is deferred (re-queued
with a delay), and a failed send frees the key so the host's retry sends it. A duplicate is a
message whose content (subject, body, recipients, type, template and its data:
`shared.notifications.fingerprint`) equals the one recorded for the event id. What can never
succeed goes to the poison queue at once with its reason: an invalid message, an email the
provider refused for good, or an event id reused for different content (the reason names the
fields that differ, never their values). What may succeed later (TransientEmailError,
storage errors) raises, so the host retries it.

Each delivery is counted by what came of it (`shared.telemetry.email`, metric `app.emails`):
sent, duplicate (answered from the event's record), deferred, failed (the host retries) or
rejected (to the poison queue).
"""

from __future__ import annotations

import logging
from typing import Any

import azure.functions as func
from blobsingleton import Busy, PayloadMismatch, once
from blobsingleton.config import scope_of

from shared import poison, telemetry
from shared.notifications import (
    Notification,
    PermanentEmailError,
    sender_from_settings,
)
from shared.notifications.fingerprint import ContentMismatch, payload
from shared.settings import number_setting

log = logging.getLogger(__name__)

QUEUE = "%NOTIFICATIONS_QUEUE%"

bp = func.Blueprint()


def in_progress_seconds() -> float:
    """App setting EMAIL_IN_PROGRESS_SECONDS (default 15, 1 to 300): how long the send of an
    instance that died holds its event id. A copy arriving while a send runs is deferred that
    long at most. A live send keeps its claim with a heartbeat, however long it takes."""
    return number_setting("EMAIL_IN_PROGRESS_SECONDS", 15.0, 1.0, 300.0)


IN_PROGRESS_SECONDS = in_progress_seconds()


def _duplicate(result: dict[str, Any]) -> dict[str, Any]:
    """A duplicate of an event already sent gets the send's stored result: counted."""
    telemetry.email("duplicate")
    return result


@once(
    "email-{notification.event_id}",
    payload=payload,
    busy=Busy.defer(queue=QUEUE),
    in_progress_timeout=IN_PROGRESS_SECONDS,
    on_replay=_duplicate,
)
def _deliver_once(notification: Notification, msg: func.QueueMessage) -> dict[str, Any]:
    result = sender_from_settings().send(notification)
    telemetry.email("sent", result.provider)
    log.info(
        "notification %s (%s) sent via %s, message id %s, %d attempt(s)",
        notification.event_id, notification.type, result.provider, result.message_id,
        result.attempts,
    )  # fmt: skip
    return result.to_dict()


#: Where the emails' run-once records are (the status page counts the completed ones).
RECORD_SCOPE = scope_of(_deliver_once)


def deliver(notification: Notification, msg: func.QueueMessage) -> Any:
    """Send `notification` once per event id. `msg` is the trigger a deferral re-enqueues.
    Returns the send's result (`SendResult.to_dict()`), or None when deferred: a send of the
    same event is in progress elsewhere, and a copy of `msg` was queued for later.

    Raises `ContentMismatch` (naming the differing fields) when the event id was used before
    for a notification with other content.
    """
    try:
        result = _deliver_once(notification, msg)
    except PayloadMismatch as mismatch:
        raise ContentMismatch(notification.event_id, mismatch.fields) from None
    except (PermanentEmailError, ContentMismatch):
        raise  # counted where it is poisoned
    except Exception:
        telemetry.email("failed")
        raise
    if result is None:
        telemetry.email("deferred")
    return result


@bp.queue_trigger(arg_name="msg", queue_name=QUEUE, connection="AzureWebJobsStorage")
def send_notification(msg: func.QueueMessage) -> None:
    """Parse, then send once; poison what can never be sent, raise what may work later."""
    notification = poison.admit(msg, QUEUE, Notification)
    if notification is None:
        telemetry.email("rejected")  # not a notification: poisoned
        return
    try:
        deliver(notification, msg)
    except (PermanentEmailError, ContentMismatch) as exc:
        telemetry.email("rejected")
        poison.reject(msg, QUEUE, f"event {notification.event_id}: {exc}")
