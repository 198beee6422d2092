"""Move a queue message to its poison queue at once, with the reason in the log.

The host moves a message to `{queue}-poison` only after maxDequeueCount (5) failed attempts.
A message that can never succeed (invalid body, an email the provider refused for good) is
better moved straight away: `reject` puts a copy of its body there, the way the host would
(same queue name, base64 encoding), and the function then returns normally so the host
deletes the original. Only ids and the reason are logged, never the body.

The host merges a JSON body's top-level fields into the trigger metadata the worker builds
`func.QueueMessage` from, so `msg.id` and `msg.dequeue_count` are the sender's to set. Log
lines name the poison copy's own queue id, and `admit` poisons at once a body that sets any
host metadata field (none of this app's messages has one), before anything trusts them.
"""

from __future__ import annotations

import logging
from typing import TypeVar

import azure.functions as func

from shared import ops_problems, settings, storage
from shared.models import MessageModel
from shared.queue_metadata import describe_id, overridden_fields

logger = logging.getLogger(__name__)

POISON_SUFFIX = "-poison"
M = TypeVar("M", bound=MessageModel)


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
    copy_id = storage.send_message(poison, msg.get_body(), connection=connection)
    logger.warning(
        "message %s moved to %s as message %s: %s",
        describe_id(msg),
        poison,
        copy_id,
        reason[:1000],
    )
    ops_problems.note_poisoned(poison, copy_id, reason)  # shown on the status page too
    return poison


def admit(
    msg: func.QueueMessage,
    queue: str,
    model: type[M],
    *,
    reason: str = "",
) -> M | None:
    """`msg` parsed once into its `model`, or None when it was poisoned and the function
    should return: every queue function's bound -> screen -> validate -> poison, in one place.

    The body is decoded within the model's bound (`MessageModel.decode`), screened (a body
    that sets any host metadata field is poisoned: none of this app's messages has one,
    and `msg.id` and `msg.dequeue_count` are then the sender's), then validated. A body
    that can never succeed raises the model's `error`: its message, after `reason`, is the
    poison reason. Anything else propagates, so the host
    retries. Such a message reaches the function only when the worker could decode the
    overridden fields; when it cannot (a non-numeric DequeueCount, a malformed
    InsertionTime) the invocation fails before any app code runs, on Azure as here.
    """
    try:
        data = model.decode(msg.get_body())
        overridden = overridden_fields(data)
        if not overridden:
            return model.from_data(data)
    except model.error as error:
        reject(msg, queue, f"{reason}{error}")
        return None
    fields = ", ".join(overridden)
    reject(msg, queue, f"its body sets host metadata field(s) {fields}, which this app's "
                       "messages never carry")  # fmt: skip
    return None
