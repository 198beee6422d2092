"""Put a queue message back for later without burning its dequeue count.

Failing the invocation would make the host retry at once and count the attempt toward
poison; instead a copy is enqueued with a visibility delay and this delivery completes.
The copy is base64-encoded, as the host's queue trigger expects by default.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Protocol, runtime_checkable

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError

from blobsingleton import _defaults
from blobsingleton._connection import StorageAccount
from blobsingleton._events import emit
from blobsingleton.settings import resolve_placeholders

log = logging.getLogger("blobsingleton")

MAX_DELAY = 7 * 24 * 3600  # the queue service's visibility timeout limit

#: The trigger metadata the host sends with a queue message. The host merges a JSON body's
#: top-level fields into it case-insensitively, so a body field named like one of these
#: replaces the queue's value in `func.QueueMessage` (`msg.id`, `msg.dequeue_count`...).
HOST_QUEUE_METADATA = (
    "Id",
    "DequeueCount",
    "InsertionTime",
    "ExpirationTime",
    "NextVisibleTime",
    "PopReceipt",
    "QueueTrigger",
)


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


def overridden_metadata(body: bytes) -> list[str]:
    """The host metadata names a JSON-object body overrides (case-insensitive), if any."""
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):  # not JSON, or nested too deep
        return []
    if not isinstance(parsed, dict):
        return []
    fields = {str(key).lower() for key in parsed}
    return [name for name in HOST_QUEUE_METADATA if name.lower() in fields]


def describe_id(message: QueueMessageLike) -> str:
    """`message.id` for a log line, flagged when the body set it (the queue's id is then lost)."""
    if "Id" in overridden_metadata(message.get_body()):
        return f"{message.id!r} (an id its body set; the queue's own id is not available)"
    return str(message.id)


def send_message(
    storage: StorageAccount, queue: str, body: bytes, visibility_timeout: int | None = None
) -> str:
    """Enqueue `body` base64-encoded (the host's default), creating the queue if missing;
    returns the new message's queue id."""
    from azure.storage.queue import BinaryBase64DecodePolicy, BinaryBase64EncodePolicy

    client = storage.queue_service().get_queue_client(
        queue,
        message_encode_policy=BinaryBase64EncodePolicy(),
        message_decode_policy=BinaryBase64DecodePolicy(),
    )
    try:
        sent = client.send_message(body, visibility_timeout=visibility_timeout)
    except ResourceNotFoundError:
        with contextlib.suppress(ResourceExistsError):
            client.create_queue()
        sent = client.send_message(body, visibility_timeout=visibility_timeout)
    return str(sent.id)


def find_message(arguments: dict[str, object]) -> QueueMessageLike:
    """The queue message among a function's arguments (deferral needs a queue trigger)."""
    for value in arguments.values():
        if isinstance(value, QueueMessageLike) and not isinstance(value, (str, bytes)):
            return value
    raise TypeError("on_busy=DEFER needs a func.QueueMessage argument (a queue-triggered function)")
