"""What leases and records use when nothing is injected (docs/internals.md): the backends a
test set (`_backends`), else Blob Storage's, built here. Above every backend; none imports it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from blobsingleton import _connection
from blobsingleton._blob_lease import BlobLease
from blobsingleton._blob_records import BlobRecordStore
from blobsingleton._connection import (
    RECORD_CONTAINER,
    StorageAccount,
    container,
    from_settings,
    setting,
)
from blobsingleton._keys import namespace as resolve_namespace
from blobsingleton._line import FairLease
from blobsingleton._queues import send_message as enqueue
from blobsingleton._semaphore import LeaseSemaphore

if TYPE_CHECKING:
    from blobsingleton._lease import BaseLease
    from blobsingleton._records import RecordStore

#: Stores built here, each with the account it was built for (an id is reused once freed).
_stores: dict[tuple[Any, ...], tuple[StorageAccount, RecordStore]] = {}


def record_store(
    *, storage: StorageAccount | None = None, namespace: str | None = None,
    scope: str | None = None,
) -> RecordStore:  # fmt: skip
    """The record store a `@once` without `store=` uses: a `BlobRecordStore`, one per account,
    container, namespace and scope (its clients and watcher are kept)."""
    backends = _connection.current_backends()
    if backends is not None:
        return backends.record_store(storage=storage, namespace=namespace, scope=scope)
    account = storage or from_settings()
    name = setting(RECORD_CONTAINER[0]) or RECORD_CONTAINER[1]
    ident = (id(account), name, resolve_namespace(namespace), scope)
    found = _stores.get(ident)
    if found is None or found[0] is not account:
        if len(_stores) > 1000:
            _stores.clear()
        store = BlobRecordStore(
            container(None, RECORD_CONTAINER, account), namespace=ident[2], scope=scope
        )
        found = _stores[ident] = (account, store)
    return found[1]


def lease(key: str, *, limit: int = 1, fair: bool = False, **options: Any) -> BaseLease | BlobLease:
    """The lease a `@singleton` takes: `BlobLease(key, **options)`, `FairLease` if `fair`, or
    with `limit` above 1 a `LeaseSemaphore` of that many holders."""
    backends = _connection.current_backends()
    if backends is not None:
        return backends.lease(key, limit=limit, fair=fair, **options)
    if limit > 1:
        return LeaseSemaphore(key, limit, fair=fair, **options)
    if fair:
        return FairLease(key, **options)
    return BlobLease(key, **options)


def send_message(storage: StorageAccount | None, queue: str, body: bytes, delay: int) -> str:
    """Enqueue `body` on `queue`, visible in `delay` s (DEFER's copy): the backends' queue, else
    `storage`'s (default: AzureWebJobsStorage). Returns the new message's id."""
    backends = _connection.current_backends()
    if backends is not None:
        return backends.send_message(queue, body, delay)
    return enqueue(storage or from_settings(), queue, body, delay)
