"""What a lease or record uses when nothing is injected: the Functions conventions.

Storage: the account app setting `AzureWebJobsStorage` names (connection string or identity
settings), the account the host itself uses. Containers: app settings `LEASE_CONTAINER` and
`RUNONCE_CONTAINER`, else `locks` and `runonce`. Pass a `ContainerClient` (or a
`StorageAccount`) to any lease, record store or decorator to choose otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from blobsingleton._connection import StorageAccount, from_settings
from blobsingleton.settings import setting

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient

LOCK_CONTAINER = ("LEASE_CONTAINER", "locks")
RECORD_CONTAINER = ("RUNONCE_CONTAINER", "runonce")


def account_from_settings() -> StorageAccount:
    """The account of app setting `AzureWebJobsStorage`, the one the host itself uses."""
    return from_settings("AzureWebJobsStorage")


def container(
    given: ContainerClient | None,
    convention: tuple[str, str],
    storage: StorageAccount | None = None,
) -> ContainerClient:
    """`given`, else the conventional container of `storage` (default: AzureWebJobsStorage)."""
    if given is not None:
        return given
    name = setting(convention[0], convention[1]) or convention[1]
    return (storage or account_from_settings()).blob_service().get_container_client(name)
