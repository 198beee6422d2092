"""Queue messages as the host's trigger expects them: `send_message` enqueues base64, and
`QueueMessageLike` is what `Busy.DEFER` needs of `azure.functions.QueueMessage`."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from typing import Protocol, runtime_checkable

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError

from blobsingleton._connection import StorageAccount
from blobsingleton._storage_errors import refusal_named


@runtime_checkable
class QueueMessageLike(Protocol):
    """What the queue helpers and `Busy.DEFER` need of `azure.functions.QueueMessage`."""

    @property
    def id(self) -> str | None: ...

    @property
    def dequeue_count(self) -> int | None: ...

    def get_body(self) -> bytes: ...


#: The extra that installs the queue SDK `send_message` (and so `Busy.DEFER`) needs.
QUEUE_EXTRA = "pip install blobsingleton[queue]"


def require_sdk(function: str) -> None:
    """Refuse (`ImportError` naming the `[queue]` extra) a `Busy.DEFER` on `function` where
    `azure-storage-queue` is not installed: at decoration, not at the first busy delivery."""
    try:
        found = importlib.util.find_spec("azure.storage.queue") is not None
    except ImportError:
        found = False
    if not found:
        raise ImportError(
            f"{function}: Busy.DEFER re-enqueues the queue message with azure-storage-queue,"
            f" which is not installed: {QUEUE_EXTRA}",
            name="azure.storage.queue",
        )


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
    with refusal_named():  # the account refusing the credentials: named as the library names it
        try:
            sent = client.send_message(body, visibility_timeout=visibility_timeout)
        except ResourceNotFoundError:
            with contextlib.suppress(ResourceExistsError):
                client.create_queue()
            sent = client.send_message(body, visibility_timeout=visibility_timeout)
    return str(sent.id)


__all__ = ["QUEUE_EXTRA", "QueueMessageLike", "require_sdk", "send_message"]
