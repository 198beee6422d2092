"""One place that builds the Azure Storage clients, from the connection the host uses.

Supports a connection string in `AzureWebJobsStorage` (including `UseDevelopmentStorage=true`)
and identity-based connections (`AzureWebJobsStorage__accountName`, or the per-service
`__blobServiceUri` / `__queueServiceUri` / `__tableServiceUri`) through `DefaultAzureCredential`.
Every client carries a request-counting policy so benchmarks count requests, not guesses.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

from shared import settings

AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def azurite_connection_string(host: str, blob: int, queue: int, table: int) -> str:
    """The connection string of an Azurite instance listening on the given ports."""
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint=http://{host}:{blob}/{AZURITE_ACCOUNT};"
        f"QueueEndpoint=http://{host}:{queue}/{AZURITE_ACCOUNT};"
        f"TableEndpoint=http://{host}:{table}/{AZURITE_ACCOUNT};"
    )


DEVELOPMENT_STORAGE = azurite_connection_string("127.0.0.1", 10000, 10001, 10002)


class RequestCounter:
    """Counts every HTTP request (retries included) a client sends, by HTTP method.

    Installed as the clients' `raw_request_hook`, which the SDKs call once per attempt.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def __call__(self, request: Any) -> None:
        method = request.http_request.method
        with self._lock:
            self._counts[method] += 1

    def by_method(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()


#: Process-wide counter attached to every client the app builds here.
request_counter = RequestCounter()


@dataclass(frozen=True)
class StorageAccount:
    """How to reach one storage account: a connection string or identity-based endpoints."""

    connection_string: str | None = None
    blob_url: str | None = None
    queue_url: str | None = None
    table_url: str | None = None
    client_id: str | None = None

    @classmethod
    def from_settings(cls, connection: str = "AzureWebJobsStorage") -> StorageAccount:
        """The account named by app setting `connection`, or by its `connection__*` settings."""
        value = settings.setting(connection)
        if value:
            if value.strip().rstrip(";").lower() == "usedevelopmentstorage=true":
                value = DEVELOPMENT_STORAGE
            return cls(connection_string=value)
        account = settings.setting(f"{connection}__accountName")
        blob = settings.setting(f"{connection}__blobServiceUri")
        queue = settings.setting(f"{connection}__queueServiceUri")
        table = settings.setting(f"{connection}__tableServiceUri")
        if account:
            blob = blob or f"https://{account}.blob.core.windows.net"
            queue = queue or f"https://{account}.queue.core.windows.net"
            table = table or f"https://{account}.table.core.windows.net"
        if not (blob or queue or table):
            raise settings.SettingMissing(connection)
        return cls(
            blob_url=blob,
            queue_url=queue,
            table_url=table,
            client_id=settings.setting(f"{connection}__clientId"),
        )

    def _credential(self) -> Any:
        from azure.identity import DefaultAzureCredential

        return DefaultAzureCredential(managed_identity_client_id=self.client_id)

    def _build(
        self,
        client_cls: Any,
        url: str | None,
        service: str,
        counter: RequestCounter,
        **kwargs: Any,
    ) -> Any:
        kwargs["raw_request_hook"] = counter
        if self.connection_string:
            return client_cls.from_connection_string(self.connection_string, **kwargs)
        if not url:
            raise settings.SettingMissing(f"AzureWebJobsStorage__{service}ServiceUri")
        return client_cls(url, credential=self._credential(), **kwargs)

    def blob_service(self, counter: RequestCounter = request_counter, **options: Any) -> Any:
        """A new `BlobServiceClient`; `options` are client options (e.g. `max_chunk_get_size`)."""
        from azure.storage.blob import BlobServiceClient

        return self._build(BlobServiceClient, self.blob_url, "blob", counter, **options)

    def queue_service(self, counter: RequestCounter = request_counter) -> Any:
        """Queue service client with base64 message encoding, the host's default.

        The encoding applies to queue clients built with `queue_client()` below, which passes
        the policies on (`get_queue_client` alone does not).
        """
        from azure.storage.queue import (
            BinaryBase64DecodePolicy,
            BinaryBase64EncodePolicy,
            QueueServiceClient,
        )

        return self._build(
            QueueServiceClient,
            self.queue_url,
            "queue",
            counter,
            message_encode_policy=BinaryBase64EncodePolicy(),
            message_decode_policy=BinaryBase64DecodePolicy(),
        )

    def table_service(self, counter: RequestCounter = request_counter) -> Any:
        from azure.data.tables import TableServiceClient

        return self._build(TableServiceClient, self.table_url, "table", counter)


@functools.cache
def _clients(account: StorageAccount) -> dict[str, Any]:
    return {}


_lock = threading.Lock()


def _cached(kind: str, connection: str) -> Any:
    account = StorageAccount.from_settings(connection)
    cache = _clients(account)
    with _lock:
        if kind not in cache:
            cache[kind] = getattr(account, f"{kind}_service")()
        return cache[kind]


def blob_service(connection: str = "AzureWebJobsStorage") -> Any:
    """A shared `BlobServiceClient` for the account the connection setting names."""
    return _cached("blob", connection)


def queue_service(connection: str = "AzureWebJobsStorage") -> Any:
    """A shared `QueueServiceClient` for the connection's account (use `queue_client()`)."""
    return _cached("queue", connection)


def queue_client(queue_name: str, connection: str = "AzureWebJobsStorage") -> Any:
    """A `QueueClient` for `queue_name` with base64 messages, like the host's queue trigger.

    (`QueueServiceClient.get_queue_client` does not pass its encoding policies on.)
    """
    return encoded_queue_client(queue_service(connection), queue_name)


def encoded_queue_client(service: Any, queue_name: str) -> Any:
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
) -> None:
    """Enqueue `body` (base64, like the host) on `queue_name`, creating the queue if missing."""
    from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError

    client = queue_client(queue_name, connection)
    try:
        client.send_message(body, visibility_timeout=visibility_timeout)
    except ResourceNotFoundError:
        with contextlib.suppress(ResourceExistsError):
            client.create_queue()
        client.send_message(body, visibility_timeout=visibility_timeout)


def table_service(connection: str = "AzureWebJobsStorage") -> Any:
    """A shared `TableServiceClient` for the connection's account."""
    return _cached("table", connection)
