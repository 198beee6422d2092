"""Put a queue message back for later without burning its dequeue count (docs/internals.md)."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

from blobsingleton import _defaults
from blobsingleton._connection import StorageAccount
from blobsingleton._events import emit
from blobsingleton.queues import QueueMessageLike, send_message
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
    log.info(  # (the id the message's trigger metadata gave, which a JSON body may replace)
        "deferred message %r on %s by %d s as message %s: %s",
        message.id, name, seconds, copy_id, reason,
    )  # fmt: skip
    emit("defer", queue=name, message_id=copy_id, delay_s=seconds, reason=reason)


def find_message(arguments: dict[str, object]) -> QueueMessageLike | None:
    """The queue message among a guarded function's arguments (str and bytes are not)."""
    for value in arguments.values():
        if isinstance(value, QueueMessageLike) and not isinstance(value, (str, bytes)):
            return value
    return None


def may_take_message(fn: Callable[..., Any]) -> bool:
    """Whether a queue message can be among `fn`'s arguments: a parameter annotated as one,
    or one without an annotation (only the call can tell)."""
    for parameter in inspect.signature(fn).parameters.values():
        annotation = parameter.annotation
        if annotation is inspect.Parameter.empty or "QueueMessage" in str(annotation):
            return True
    return False
