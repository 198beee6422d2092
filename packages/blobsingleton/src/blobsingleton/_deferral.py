"""Put a queue message back for later without burning its dequeue count.

Failing the invocation would make the host retry at once and count the attempt toward
poison; instead a copy is enqueued with a visibility delay and this delivery completes.
The copy is base64-encoded, as the host's queue trigger expects by default.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Protocol, runtime_checkable

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError

from blobsingleton import _defaults
from blobsingleton._connection import StorageAccount
from blobsingleton._events import emit
from blobsingleton.settings import resolve_placeholders

log = logging.getLogger("blobsingleton")

MAX_DELAY = 7 * 24 * 3600  # the queue service's visibility timeout limit


@runtime_checkable
class QueueMessageLike(Protocol):
    """What deferral needs of `azure.functions.QueueMessage`."""

    @property
    def id(self) -> str | None: ...

    @property
    def dequeue_count(self) -> int | None: ...

    def get_body(self) -> bytes: ...


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
    send_message(storage or _defaults.account_from_settings(), name, message.get_body(), seconds)
    log.info("deferred message %s on %s by %d s: %s", message.id, name, seconds, reason)
    emit("defer", queue=name, message_id=message.id, delay_s=seconds, reason=reason)


def send_message(
    storage: StorageAccount, queue: str, body: bytes, visibility_timeout: int | None = None
) -> None:
    """Enqueue `body` base64-encoded (the host's default), creating the queue if missing."""
    from azure.storage.queue import BinaryBase64DecodePolicy, BinaryBase64EncodePolicy

    client = storage.queue_service().get_queue_client(
        queue,
        message_encode_policy=BinaryBase64EncodePolicy(),
        message_decode_policy=BinaryBase64DecodePolicy(),
    )
    try:
        client.send_message(body, visibility_timeout=visibility_timeout)
    except ResourceNotFoundError:
        with contextlib.suppress(ResourceExistsError):
            client.create_queue()
        client.send_message(body, visibility_timeout=visibility_timeout)


def find_message(arguments: dict[str, object]) -> QueueMessageLike:
    """The queue message among a function's arguments (deferral needs a queue trigger)."""
    for value in arguments.values():
        if isinstance(value, QueueMessageLike) and not isinstance(value, (str, bytes)):
            return value
    raise TypeError("on_busy=DEFER needs a func.QueueMessage argument (a queue-triggered function)")
