"""Event notification emails: each event is emailed once, however many instances see it.

A queue message (see `shared.notifications.message`) becomes one send, guarded by
`@once("email-{notification.event_id}")`: a duplicate of an event already sent completes
without sending, a duplicate arriving while another instance is sending is deferred (re-queued
with a delay), and a failed send frees the key so the host's retry sends it. A duplicate is a
message whose content fingerprint (subject, body, recipients, type, template and its data:
`shared.notifications.fingerprint`) equals the one recorded for the event id. What can never
succeed goes to the poison queue at once with its reason: an invalid message, an email the
provider refused for good, or an event id reused for different content (the reason names the
fields that differ, never their values). What may succeed later (TransientEmailError,
storage errors) raises, so the host retries it.
"""

from __future__ import annotations

import logging
from typing import Any

import azure.functions as func
from blobsingleton import Busy, PayloadMismatch, current_run, once
from blobsingleton.settings import setting

from shared import poison
from shared.notifications import (
    InvalidNotification,
    Notification,
    PermanentEmailError,
    sender_from_settings,
)
from shared.notifications.fingerprint import (
    ContentMismatch,
    FingerprintStore,
    delivering,
    differing_fields,
    payload,
)

log = logging.getLogger(__name__)

QUEUE = "%NOTIFICATIONS_QUEUE%"

bp = func.Blueprint()


def in_progress_seconds() -> float:
    """App setting EMAIL_IN_PROGRESS_SECONDS (default 15, 1 to 300): how long the send of an
    instance that died holds its event id. A copy arriving while a send runs is deferred that
    long at most. A live send keeps its claim with a heartbeat, however long it takes."""
    raw = setting("EMAIL_IN_PROGRESS_SECONDS", "15") or "15"
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(
            f"app setting EMAIL_IN_PROGRESS_SECONDS must be a number of seconds, not {raw!r}"
        ) from None
    if not 1.0 <= value <= 300.0:
        raise ValueError(f"app setting EMAIL_IN_PROGRESS_SECONDS must be 1 to 300, not {raw!r}")
    return value


IN_PROGRESS_SECONDS = in_progress_seconds()


@once(
    "email-{notification.event_id}",
    payload=payload,
    store=FingerprintStore(),
    on_in_progress=Busy.DEFER,
    queue=QUEUE,
    in_progress_timeout=IN_PROGRESS_SECONDS,
)
def _deliver_once(notification: Notification) -> dict[str, Any]:
    # The claim may be older than it looks: a create whose answer was lost is sent again by
    # the SDK and known as ours only then, when the record may already have expired and been
    # taken over. No send then: RunLost frees the key (if still ours) and the host retries.
    current_run().ensure_held()
    result = sender_from_settings().send(notification)
    log.info(
        "notification %s (%s) sent via %s, message id %s, %d attempt(s)",
        notification.event_id, notification.type, result.provider, result.message_id,
        result.attempts,
    )  # fmt: skip
    return result.to_dict()


def deliver(notification: Notification) -> Any:
    """Send `notification` once per event id. A deferral re-enqueues the invocation's trigger
    message, which the library's worker extension records (PYTHON_ENABLE_WORKER_EXTENSIONS).

    Raises `ContentMismatch` (naming the differing fields) when the event id was used before
    for a notification with other content.
    """
    with delivering(notification) as delivery:
        try:
            return _deliver_once(notification)
        except PayloadMismatch:
            fields = delivery.differing or differing_fields(None, delivery.fingerprint)
            raise ContentMismatch(notification.event_id, fields) from None


@bp.queue_trigger(arg_name="msg", queue_name=QUEUE, connection="AzureWebJobsStorage")
def send_notification(msg: func.QueueMessage) -> None:
    """Parse, then send once; poison what can never be sent, raise what may work later."""
    notification = poison.admit(msg, QUEUE, Notification.parse, InvalidNotification)
    if notification is None:
        return
    try:
        deliver(notification)
    except (PermanentEmailError, ContentMismatch) as exc:
        poison.reject(msg, QUEUE, f"event {notification.event_id}: {exc}")
