"""Put a queue message back for later without burning its dequeue count.

Failing the invocation would make the host retry at once and count the attempt toward
poison; instead a copy is enqueued with a visibility delay and this delivery completes.
The copy is base64-encoded, as the host's queue trigger expects by default. The message is
the invocation's trigger, as the worker extension recorded it (`_trigger.py`), else the queue
message among the guarded function's arguments.
"""

from __future__ import annotations

import logging

from blobsingleton import _defaults, _trigger
from blobsingleton._connection import StorageAccount
from blobsingleton._events import emit
from blobsingleton.queues import QueueMessageLike, describe_id, send_message
from blobsingleton.settings import resolve_placeholders

log = logging.getLogger("blobsingleton")

MAX_DELAY = 7 * 24 * 3600  # the queue service's visibility timeout limit


def defer(
    message: QueueMessageLike,
    queue: str,
    delay: float,
    *,
    reason: str,
    storage: StorageAccount | None = None,
) -> None:
    """Enqueue a copy of `message` on `queue` (`%SETTING%` allowed), visible after `delay` s."""
    name = resolve_placeholders(queue)
    seconds = max(1, min(MAX_DELAY, round(delay)))
    body = message.get_body()
    copy_id = send_message(storage or _defaults.account_from_settings(), name, body, seconds)
    log.info(
        "deferred message %s on %s by %d s as message %s: %s",
        describe_id(message),
        name,
        seconds,
        copy_id,
        reason,
    )
    emit("defer", queue=name, message_id=copy_id, delay_s=seconds, reason=reason)


def find_message(arguments: dict[str, object]) -> QueueMessageLike | None:
    """The invocation's trigger queue message: recorded by the worker extension, else found
    among the guarded function's arguments; None when neither has it."""
    return _trigger.trigger_message() or _trigger.queue_message_in(arguments)
