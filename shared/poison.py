"""Move a queue message to its poison queue at once, with the reason in the log.

The host moves a message to `{queue}-poison` only after maxDequeueCount (5) failed attempts.
A message that can never succeed (invalid body, an email the provider refused for good) is
better moved straight away: `reject` puts a copy of its body there, the way the host would
(same queue name, base64 encoding), and the function then returns normally so the host
deletes the original. Only the message id and the reason are logged, never the body.
"""

from __future__ import annotations

import logging

import azure.functions as func
from blobsingleton import settings

from shared import storage

logger = logging.getLogger(__name__)

POISON_SUFFIX = "-poison"


def poison_queue_name(queue: str) -> str:
    """The host's poison queue for `queue` (placeholders such as %MY_QUEUE% resolved)."""
    return settings.resolve_placeholders(queue) + POISON_SUFFIX


def reject(
    msg: func.QueueMessage,
    queue: str,
    reason: str,
    *,
    connection: str = "AzureWebJobsStorage",
) -> str:
    """Copy `msg`'s body to `{queue}-poison` (created if missing); returns that queue's name.

    If the copy cannot be written the error propagates, so the host retries the message and,
    at worst, moves it to the poison queue itself: it is never lost.
    """
    poison = poison_queue_name(queue)
    storage.send_message(poison, msg.get_body(), connection=connection)
    logger.warning(
        "message %s (dequeue count %s) moved to %s: %s",
        msg.id,
        msg.dequeue_count,
        poison,
        reason[:1000],
    )
    return poison
