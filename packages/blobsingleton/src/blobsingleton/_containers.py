"""The containers leases and records live in when none is given (docs/internals.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from blobsingleton._connection import StorageAccount, from_settings
from blobsingleton._settings import setting

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient

LOCK_CONTAINER = ("LEASE_CONTAINER", "locks")
RECORD_CONTAINER = ("RUNONCE_CONTAINER", "runonce")


def container(
    given: ContainerClient | None,
    convention: tuple[str, str],
    storage: StorageAccount | None = None,
) -> ContainerClient:
    """`given`, else the conventional container of `storage` (default: AzureWebJobsStorage)."""
    if given is not None:
        return given
    name = setting(convention[0], convention[1]) or convention[1]
    return (storage or from_settings()).blob_service().get_container_client(name)
