"""Helpers for queue-triggered functions: enqueue as the host's trigger expects
(`send_message`), and see which host metadata a JSON body replaced (`overridden_metadata`,
`describe_id`). `QueueMessageLike` is what they need of `azure.functions.QueueMessage`.
"""

from __future__ import annotations

import contextlib
import importlib
import json
from typing import Protocol, runtime_checkable

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError

from blobsingleton._connection import StorageAccount


@runtime_checkable
class QueueMessageLike(Protocol):
    """What the queue helpers and `Busy.DEFER` need of `azure.functions.QueueMessage`."""

    @property
    def id(self) -> str | None: ...

    @property
    def dequeue_count(self) -> int | None: ...

    def get_body(self) -> bytes: ...


#: The host's queue trigger metadata. It merges a JSON body's top-level fields into it (any
#: case), so a body field named like one replaces `msg.id`, `msg.dequeue_count`...
HOST_QUEUE_METADATA = (
    "Id",
    "DequeueCount",
    "InsertionTime",
    "ExpirationTime",
    "NextVisibleTime",
    "PopReceipt",
    "QueueTrigger",
)


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
    sdk = importlib.import_module("azure.storage.queue")  # the [queue] extra
    client = storage.queue_service().get_queue_client(
        queue,
        message_encode_policy=sdk.BinaryBase64EncodePolicy(),
        message_decode_policy=sdk.BinaryBase64DecodePolicy(),
    )
    try:
        sent = client.send_message(body, visibility_timeout=visibility_timeout)
    except ResourceNotFoundError:
        with contextlib.suppress(ResourceExistsError):
            client.create_queue()
        sent = client.send_message(body, visibility_timeout=visibility_timeout)
    return str(sent.id)


__all__ = [
    "HOST_QUEUE_METADATA",
    "QueueMessageLike",
    "describe_id",
    "overridden_metadata",
    "send_message",
]
