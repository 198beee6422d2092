"""A key's lock on Azure Blob Storage: the storage operations on its blobs, errors translated in
one place, and the plain `BlobLease` on them (docs/internals.md)."""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from blobsingleton import _connection
from blobsingleton._connection import TIME_RESOLUTION, StorageAccount, epoch
from blobsingleton._events import emit_lease
from blobsingleton._keys import blob_name, prefix
from blobsingleton._keys import namespace as resolve_namespace
from blobsingleton._lease import DEFAULT_PERIOD, DEFAULT_POLL_INTERVAL, BaseLease
from blobsingleton._listing import list_all
from blobsingleton._owner import Owner
from blobsingleton._storage_errors import (
    LockBusy,
    LockMissing,
    created_if_missing,
    lease_errors,
    unavailable_as,
)
from blobsingleton.errors import LeaseError, LeaseLost, StorageUnavailable

if TYPE_CHECKING:
    from azure.storage.blob import BlobLeaseClient, ContainerClient

log = logging.getLogger("blobsingleton")

#: Every call is bounded, so a hung connection cannot outlive the lease it serves (seconds).
REQUEST_TIMEOUT = 5.0
#: Tickets are zero-padded so that the service lists entries in ticket order.
TICKET_DIGITS = 15


@dataclass(frozen=True)
class LockState:
    """What anyone can read about a lock: its current token, lease state and owner record."""

    token: int
    leased: bool
    lease_state: str
    owner: Owner | None

    @property
    def owner_is_current(self) -> bool:
        """The owner record belongs to the current acquisition, not an earlier one."""
        return self.owner is not None and self.owner.token == self.token


def _bounded(seconds: float) -> dict[str, Any]:
    """A call's timeouts: the service's (whole seconds), the client's to connect and to read."""
    return {"timeout": max(1, int(seconds)), "connection_timeout": seconds, "read_timeout": seconds}


class LockBlob:
    """The lock blob of one key: acquire, fence, renew, publish owner, hand over, release, read.
    Each method is one storage request on the steady-state path."""

    def __init__(
        self, container: ContainerClient, blob_name: str, key: str, namespace: str = ""
    ) -> None:
        self.container = container
        self._blob = container.get_blob_client(blob_name)
        self.name = blob_name
        self.key = key
        self.namespace = namespace
        self._options = _bounded(REQUEST_TIMEOUT)

    @classmethod
    def of(
        cls,
        key: str,
        container: ContainerClient | None = None,
        storage: StorageAccount | None = None,
        namespace: str | None = None,
        scope: str | None = None,
    ) -> LockBlob:
        """The lock blob of `key`: in `container`, else `storage`'s (default:
        AzureWebJobsStorage) `LEASE_CONTAINER` (`locks`), under `namespace` (default:
        BLOBSINGLETON_NAMESPACE, else the host id) and `scope` (a function's own keys)."""
        locks = _connection.container(container, _connection.LOCK_CONTAINER, storage)
        named = resolve_namespace(namespace)
        return cls(locks, blob_name(prefix(named, scope), key), key, named)

    def acquire(self, lease_id: str, period: float) -> None:
        """Take the lease with our id, creating what is missing; `LockBusy` when held. An
        acquire of unknown outcome is released before `StorageUnavailable` is raised."""
        options = self._options

        def ask() -> None:
            self._blob.acquire_lease(int(period), lease_id=lease_id, **options)

        try:
            with lease_errors("acquire", self.key):
                created_if_missing(ask, self.container, self._blob, **options)
        except StorageUnavailable:
            with contextlib.suppress(LeaseError, StorageUnavailable):
                self.release(lease_id, None)
            raise

    def next_token(self, lease_id: str) -> int:
        """Increment the fencing token under our lease; the service returns the new value."""
        with lease_errors("fence", self.key):
            result = self._blob.set_sequence_number("increment", lease=lease_id, **self._options)
        return int(str(result["blob_sequence_number"]))

    def renew(self, lease_id: str, token: int, timeout: float) -> None:
        """Renew our lease; `LeaseLost` if it is no longer ours. No client-side retries here."""
        with lease_errors("renew", self.key, token):
            self._lease(lease_id).renew(retry_total=0, **_bounded(timeout))

    def publish_owner(self, lease_id: str, owner: Owner) -> None:
        """Write the owner record into the lock blob's metadata (needs our lease)."""
        with lease_errors("publish owner", self.key, owner.token):
            self._blob.set_blob_metadata(owner.to_metadata(), lease=lease_id, **self._options)

    def hand_over(self, lease_id: str, to_lease_id: str, token: int | None) -> None:
        """Change our lease to `to_lease_id`: its waiter holds the lease, nobody else can."""
        with lease_errors("hand over", self.key, token):
            self._lease(lease_id).change(to_lease_id, **self._options)

    def release(self, lease_id: str, token: int | None) -> None:
        """Give the lease back so a waiter gets it now instead of at expiry."""
        with lease_errors("release", self.key, token):
            self._lease(lease_id).release(**self._options)

    def read(self) -> LockState | None:
        """The lock's public state, or None when the key was never locked."""
        try:
            with lease_errors("read", self.key):
                props = self._blob.get_blob_properties(**self._options)
        except LockMissing:
            return None
        return LockState(
            token=int(props.page_blob_sequence_number or 0),
            leased=props.lease.state == "leased",
            lease_state=str(props.lease.state),
            owner=Owner.from_metadata(props.metadata or {}),
        )

    def _lease(self, lease_id: str) -> BlobLeaseClient:
        from azure.storage.blob import BlobLeaseClient

        return BlobLeaseClient(self._blob, lease_id=lease_id)


@dataclass(frozen=True)
class Entry:
    """A live waiter in a key's line: its ticket, and the lease id it will hold the key with."""

    ticket: int
    lease_id: str


class WaitingLine:
    """The waiting line beside one key's lock blob (`FairLease`, `LeaseSemaphore(fair=True)`):
    join, refresh, leave, and who stands in it."""

    def __init__(self, container: Any, lock_blob_name: str, key: str, period: float) -> None:
        self._container = container
        self._prefix = f"{lock_blob_name}.line/"
        self._tickets = container.get_blob_client(f"{lock_blob_name}.tickets")
        self.key = key
        self.period = period

    def join(self, lease_id: str) -> int:
        """Take the next ticket and stand in line with `lease_id`: 2 requests."""
        ticket = self._next_ticket()
        self.refresh(ticket, lease_id, "join line")
        return ticket

    def refresh(self, ticket: int, lease_id: str, operation: str = "refresh line entry") -> None:
        """Prove this waiter alive (rewrites the entry, so its Last-Modified moves)."""
        with unavailable_as(operation):
            self._entry(ticket).upload_blob(b"", overwrite=True, metadata={"lease_id": lease_id})

    def leave(self, ticket: int) -> None:
        with contextlib.suppress(LockMissing), lease_errors("leave line", self.key):
            self._entry(ticket).delete_blob()  # gone already: left

    def live(self) -> list[Entry]:
        """The live entries in ticket order (1 request per 5,000 entries; none before the
        container exists: nobody has waited for any key)."""
        entries = []
        try:
            with lease_errors("list line", self.key):
                listed, served_at = list_all(self._container, self._prefix)
        except LockMissing:
            return []
        for blob in listed:
            refreshed = epoch(blob.last_modified) or 0.0
            now = served_at if served_at is not None else refreshed
            if now - refreshed > self.period + TIME_RESOLUTION:
                continue  # its waiter stopped refreshing: gone
            ticket = int(blob.name[len(self._prefix) :])
            entries.append(Entry(ticket, blob.metadata.get("lease_id", "")))
        return sorted(entries, key=lambda e: e.ticket)

    def _entry(self, ticket: int) -> Any:
        return self._container.get_blob_client(f"{self._prefix}{ticket:0{TICKET_DIGITS}d}")

    def _next_ticket(self) -> int:
        """Increment the key's ticket counter (creating it at the first waiter): the ticket."""
        with lease_errors("take ticket", self.key):
            result = created_if_missing(
                lambda: self._tickets.set_sequence_number("increment"),
                self._container,
                self._tickets,
            )
        return int(result["blob_sequence_number"])


class LeaseOptions(TypedDict, total=False):
    """`BlobLease`'s keyword arguments, for the leases built on it (`FairLease`,
    `LeaseSemaphore`)."""

    period: float
    container: ContainerClient | None
    storage: StorageAccount | None
    owner: Owner | None
    on_lost: Callable[[LeaseLost], None] | None
    poll_interval: float
    publish_owner_at_acquire: bool
    clock: Callable[[], float]
    namespace: str | None
    scope: str | None


class BlobLease(BaseLease):
    """A mutual-exclusion lease on `key`, stored as a blob lease (a fresh lease id each time;
    what each step costs: the library's page). A blocking acquire polls every `poll_interval`
    s (jittered); `FairLease` waits in line instead. `scope`: a function's own keys
    (`@singleton(scope="function")`); None: the app's. `clock`: the monotonic clock its period
    is measured on (a test injects its own)."""

    def __init__(
        self,
        key: str,
        *,
        period: float = DEFAULT_PERIOD,
        container: ContainerClient | None = None,
        storage: StorageAccount | None = None,
        owner: Owner | None = None,
        on_lost: Callable[[LeaseLost], None] | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        publish_owner_at_acquire: bool = False,
        clock: Callable[[], float] = time.monotonic,
        namespace: str | None = None,
        scope: str | None = None,
    ) -> None:
        super().__init__(
            key, period=period, poll_interval=poll_interval, on_lost=on_lost, clock=clock
        )
        self._lock = LockBlob.of(key, container, storage, namespace, scope)
        #: Whose keys these are (default: BLOBSINGLETON_NAMESPACE, else the host id).
        self.namespace = self._lock.namespace
        self._owner_template = owner or Owner()
        self.owner: Owner | None = None
        self._publish_at_acquire = publish_owner_at_acquire
        self._published = False
        self._lease_id = ""

    def _try_acquire(self) -> int | None:
        return self._ask(str(uuid.uuid4()))

    def _ask(self, lease_id: str) -> int | None:
        """Acquire Lease with `lease_id`, then its fencing token (2 requests); None when
        someone else holds it (1 request)."""
        try:
            self._lock.acquire(lease_id, self.period)
        except LockBusy:
            return None
        return self._acquired(lease_id)

    def _acquired(self, lease_id: str, token: int | None = None) -> int:
        """Finish an acquisition under `lease_id`: fencing token (unless `token` is the one
        already taken), owner record, event."""
        self._lease_id = lease_id
        if token is None:
            try:
                token = self._lock.next_token(lease_id)
            except BaseException:  # unfinished: give it back; if that fails too, it expires
                with contextlib.suppress(LeaseError):
                    self._lock.release(lease_id, None)
                raise
        template = self._owner_template
        self.owner = Owner(
            template.instance, template.function, template.invocation_id, token=token
        )
        self._published = self._publish_at_acquire
        if self._publish_at_acquire:
            self._lock.publish_owner(lease_id, self.owner)
        emit_lease("acquire", self)
        return token

    def _renew(self) -> None:
        self._lock.renew(self._lease_id, self._token or 0, timeout=self.period / 3)
        if not self._published and self.owner is not None:  # at the first renewal
            self._published = True
            try:
                self._lock.publish_owner(self._lease_id, self.owner)
            except LeaseError as error:
                log.warning("lease %s: owner record not published: %s", self.key, error)

    def _release(self) -> None:
        self._lock.release(self._lease_id, self._released_token())

    def _released_token(self) -> int | None:
        """The token of the acquisition being released (`release` has cleared `_token`)."""
        return self.owner.token if self.owner else None

    @property
    def name(self) -> str:
        """The blob name of the lock this lease holds (or, before acquiring, would take)."""
        return self._lock.name

    @property
    def lease_id(self) -> str:
        """The storage lease id of the current acquisition (needed to write the leased blob)."""
        return self._lease_id


def read_lock(
    key: str,
    *,
    container: ContainerClient | None = None,
    storage: StorageAccount | None = None,
    namespace: str | None = None,
    scope: str | None = None,
) -> LockState | None:
    """Who holds `key` now (if the owner record is current), its token and lease state."""
    return LockBlob.of(key, container, storage, namespace, scope).read()
