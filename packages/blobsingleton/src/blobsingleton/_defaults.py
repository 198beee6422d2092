"""What leases and records use when nothing is injected (docs/internals.md)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from blobsingleton._connection import StorageAccount, from_settings
from blobsingleton._keys import namespace as resolve_namespace
from blobsingleton.settings import setting

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient

    from blobsingleton._blob_lease import BlobLease
    from blobsingleton._lease import BaseLease
    from blobsingleton._records import RecordStore

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


class Backends(Protocol):
    """Where decorators get their leases, record stores, DEFER's queue and the time a timer's
    `{occurrence}` is judged at (tests: in memory, on a fake clock)."""

    def record_store(self, **options: Any) -> RecordStore: ...

    def lease(self, key: str, **options: Any) -> BaseLease: ...

    def send_message(self, queue: str, body: bytes, delay: int) -> str: ...

    def now(self) -> datetime: ...


_backends: list[Backends] = []


def set_backends(backends: Backends | None) -> Backends | None:
    """Use `backends` from now on (None: Blob Storage again); returns the previous ones."""
    previous = _backends[0] if _backends else None
    _backends.clear()
    if backends is not None:
        _backends.append(backends)
    return previous


#: Stores built here, each with the account it was built for (an id is reused once freed).
_stores: dict[tuple[Any, ...], tuple[StorageAccount, RecordStore]] = {}


def record_store(
    *, storage: StorageAccount | None = None, namespace: str | None = None,
    scope: str | None = None,
) -> RecordStore:  # fmt: skip
    """The record store a `@once` without `store=` uses: a `BlobRecordStore`, one per account,
    container, namespace and scope (its clients and watcher are kept)."""
    if _backends:
        return _backends[0].record_store(storage=storage, namespace=namespace, scope=scope)
    from blobsingleton._blob_records import BlobRecordStore

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
    if _backends:
        return _backends[0].lease(key, limit=limit, fair=fair, **options)
    if limit > 1:
        from blobsingleton._semaphore import LeaseSemaphore

        return LeaseSemaphore(key, limit, fair=fair, **options)
    if fair:
        from blobsingleton._line import FairLease

        return FairLease(key, **options)
    from blobsingleton._blob_lease import BlobLease

    return BlobLease(key, **options)


def send_message(storage: StorageAccount | None, queue: str, body: bytes, delay: int) -> str:
    """Enqueue `body` on `queue`, visible in `delay` s (DEFER's copy): the backends' queue, else
    `storage`'s (default: AzureWebJobsStorage). Returns the new message's id."""
    if _backends:
        return _backends[0].send_message(queue, body, delay)
    from blobsingleton.queues import send_message as enqueue

    return enqueue(storage or from_settings(), queue, body, delay)


def now() -> datetime | None:
    """The time a timer invocation's `{occurrence}` is judged at: the backends' (a test's
    clock), else None (the wall clock)."""
    return _backends[0].now() if _backends else None
