"""Put a queue message back for later without burning its dequeue count.

Failing the invocation would make the host retry at once and count the attempt toward
poison; instead a copy is enqueued with a visibility delay and this delivery completes.
"""

from __future__ import annotations

import logging

import azure.functions as func

from shared import storage
from shared.settings import resolve_placeholders

log = logging.getLogger("shared.deferral")

MAX_DELAY = 7 * 24 * 3600  # the queue service's visibility timeout limit


def defer(
    message: func.QueueMessage,
    queue: str,
    delay: float,
    *,
    reason: str,
    connection: str = "AzureWebJobsStorage",
) -> None:
    """Enqueue a copy of `message` on `queue` (`%SETTING%` allowed), visible after `delay` s."""
    name = resolve_placeholders(queue)
    seconds = max(1, min(MAX_DELAY, round(delay)))
    storage.send_message(
        name, message.get_body(), visibility_timeout=seconds, connection=connection
    )
    log.info("deferred message %s on %s by %d s: %s", message.id, name, seconds, reason)


def find_message(arguments: dict[str, object]) -> func.QueueMessage:
    """The queue message among a function's arguments (deferral needs a queue trigger)."""
    for value in arguments.values():
        if isinstance(value, func.QueueMessage):
            return value
    raise TypeError("on_busy=DEFER needs a func.QueueMessage argument (a queue-triggered function)")
