"""The app's storage clients: queues, tables and blobs of the account a connection names.

Every client comes from `blobsingleton.config.from_settings(connection)`, the same account (and the
same client options) the library's leases and run-once records use: a connection string in
`AzureWebJobsStorage` (`UseDevelopmentStorage=true` included) or identity-based settings
(`AzureWebJobsStorage__accountName`, or `__blobServiceUri` / `__queueServiceUri` /
`__tableServiceUri`) through `DefaultAzureCredential`. Queue clients use base64 messages, the
host's default encoding.

The retry budget. Storage answers `503 ServerBusy` and `500 OperationTimedOut` under load, and
the SDK sends the request again. Blob and queue clients built from settings retry as the
library's `blobsingleton.config.RETRY` says (3 retries about a second apart, at most 4.5 s of
waiting per request), not the SDKs' default (15 s + 3 s before the first retry, then 24, 42 s:
longer than a run-once record lives unrenewed), so retries never pile up into storms nor
outlive a record; client options that name a policy (a test, a host) keep theirs. Table
clients keep the Tables SDK's own (3 retries of a status, 0, 1.6 and 3.2 s apart).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import TYPE_CHECKING, Any, cast

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from blobsingleton import StorageAccount
from blobsingleton.config import from_settings
from blobsingleton.errors import SettingMissing

from shared.settings import setting

if TYPE_CHECKING:
    from azure.data.tables import TableServiceClient
    from azure.storage.blob import BlobServiceClient
    from azure.storage.queue import QueueClient, QueueServiceClient


def account(connection: str = "AzureWebJobsStorage") -> StorageAccount:
    """The storage account app setting `connection` names (the library's own: one pool)."""
    return from_settings(connection)


def blob_service(connection: str = "AzureWebJobsStorage") -> BlobServiceClient:
    """A shared `BlobServiceClient` for the account the connection setting names."""
    return account(connection).blob_service()


def queue_service(connection: str = "AzureWebJobsStorage") -> QueueServiceClient:
    """A shared `QueueServiceClient` for the connection's account (use `queue_client()`)."""
    return cast("QueueServiceClient", account(connection).queue_service())


def queue_client(queue_name: str, connection: str = "AzureWebJobsStorage") -> QueueClient:
    """A `QueueClient` for `queue_name` with base64 messages, like the host's queue trigger.

    (`QueueServiceClient.get_queue_client` does not pass its encoding policies on.)
    """
    return encoded_queue_client(queue_service(connection), queue_name)


def encoded_queue_client(service: QueueServiceClient, queue_name: str) -> QueueClient:
    """A `QueueClient` of `service` for `queue_name`, with the host's base64 encoding."""
    from azure.storage.queue import BinaryBase64DecodePolicy, BinaryBase64EncodePolicy

    return service.get_queue_client(
        queue_name,
        message_encode_policy=BinaryBase64EncodePolicy(),
        message_decode_policy=BinaryBase64DecodePolicy(),
    )


def send_message(
    queue_name: str,
    body: bytes,
    *,
    visibility_timeout: int | None = None,
    connection: str = "AzureWebJobsStorage",
) -> str:
    """Enqueue `body` (base64, like the host) on `queue_name`, creating the queue if missing;
    returns the new message's queue id."""
    client = queue_client(queue_name, connection)
    try:
        sent = client.send_message(body, visibility_timeout=visibility_timeout)
    except ResourceNotFoundError:
        with contextlib.suppress(ResourceExistsError):
            client.create_queue()
        sent = client.send_message(body, visibility_timeout=visibility_timeout)
    return str(sent.id)


_tables_lock = threading.Lock()


@functools.cache
def _table_service(account: StorageAccount, connection: str) -> TableServiceClient:
    from azure.data.tables import TableServiceClient

    if account.connection_string:
        return TableServiceClient.from_connection_string(
            account.connection_string, **account.client_options
        )
    name = setting(f"{connection}__accountName")
    url = setting(f"{connection}__tableServiceUri") or (
        f"https://{name}.table.core.windows.net" if name else None
    )
    if not url:
        raise SettingMissing(
            f"{connection}__tableServiceUri",
            f"identity-based {connection} needs {connection}__accountName or "
            f"{connection}__tableServiceUri for Table storage",
        )
    return TableServiceClient(url, credential=account.credential, **account.client_options)


def table_service(connection: str = "AzureWebJobsStorage") -> TableServiceClient:
    """A shared `TableServiceClient` for the connection's account."""
    with _tables_lock:  # the Tables SDK's own retries (see the module doc)
        return _table_service(from_settings(connection), connection)


def client_options(connection: str = "AzureWebJobsStorage") -> dict[str, Any]:
    """The client options the connection's clients are built with (for special clients)."""
    return dict(account(connection).client_options)
