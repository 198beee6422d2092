"""Storage operations on one lock blob, errors translated in one place (docs/internals.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from azure.core.exceptions import HttpResponseError

from blobsingleton._owner import Owner
from blobsingleton._storage import create_container_quietly, error_code, unavailable_as
from blobsingleton.errors import LeaseError, LeaseLost, StorageUnavailable

if TYPE_CHECKING:
    from azure.storage.blob import BlobLeaseClient, ContainerClient

#: Error codes meaning "the lease is not (or no longer) ours".
LOST_CODES = frozenset(
    {
        "LeaseIdMismatchWithLeaseOperation",
        "LeaseNotPresentWithLeaseOperation",
        "LeaseIsBrokenAndCannotBeRenewed",
        "LeaseIdMismatchWithBlobOperation",
        "LeaseLost",
        "LeaseIdMissing",
        "LeaseNotPresentWithBlobOperation",
        "LeaseIsBreakingAndCannotBeAcquired",
    }
)
BUSY_CODES = frozenset({"LeaseAlreadyPresent", "LeaseIsBreakingAndCannotBeAcquired"})
MISSING_CODES = frozenset({"BlobNotFound", "ContainerNotFound"})
#: Every call is bounded, so a hung connection cannot outlive the lease it serves (seconds).
REQUEST_TIMEOUT = 5.0


class LockBusy(LeaseError):
    """Internal: someone else holds the lease right now."""


class LockMissing(LeaseError):
    """Internal: the lock blob or its container does not exist yet (the message: its code)."""


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


@contextlib.contextmanager
def translated(operation: str, key: str, token: int | None = None) -> Iterator[None]:
    """Map storage errors to the lease module's exceptions, by `error_code` only (no answer, or
    a server error after the client's retries: `StorageUnavailable`)."""
    try:
        with unavailable_as(operation):
            yield
    except HttpResponseError as error:
        code = error_code(error)
        if code in BUSY_CODES:
            raise LockBusy(code) from error
        if code in MISSING_CODES:
            raise LockMissing(code) from error
        if code in LOST_CODES or (operation != "acquire" and error.status_code in (409, 412)):
            raise LeaseLost(key, token, f"{operation}: {code or error.status_code}") from error
        raise


class LockBlob:
    """The lock blob of one key: acquire, fence, renew, publish owner, release, read."""

    def __init__(self, container: ContainerClient, blob_name: str, key: str) -> None:
        self._container = container
        self._blob = container.get_blob_client(blob_name)
        self.name = blob_name
        self.key = key
        self._options = _bounded(REQUEST_TIMEOUT)

    def acquire(self, lease_id: str, period: float) -> None:
        """Take the lease with our id, creating what is missing; `LockBusy` when held. An
        acquire of unknown outcome is released before `StorageUnavailable` is raised."""
        for _ in range(3):
            try:
                with translated("acquire", self.key):
                    self._blob.acquire_lease(int(period), lease_id=lease_id, **self._options)
                return
            except LockMissing as missing:
                self._create(str(missing))
            except StorageUnavailable:
                with contextlib.suppress(LeaseError, StorageUnavailable):
                    self.release(lease_id, None)
                raise
        raise LeaseError(f"lock blob for {self.key!r} could not be created")

    def _create(self, missing: str) -> None:
        """Create the container and/or empty page blob; losing a creation race is fine."""
        with translated("create", self.key):
            if missing == "ContainerNotFound":
                create_container_quietly(self._container, **self._options)
            try:
                self._blob.create_page_blob(0, if_none_match="*", **self._options)
            except HttpResponseError as error:
                if error_code(error) not in ("BlobAlreadyExists", "LeaseIdMissing"):
                    raise

    def next_token(self, lease_id: str) -> int:
        """Increment the fencing token under our lease; the service returns the new value."""
        with translated("fence", self.key):
            result = self._blob.set_sequence_number("increment", lease=lease_id, **self._options)
        return int(str(result["blob_sequence_number"]))

    def renew(self, lease_id: str, token: int, timeout: float) -> None:
        """Renew our lease; `LeaseLost` if it is no longer ours. No client-side retries here."""
        with translated("renew", self.key, token):
            self._lease(lease_id).renew(retry_total=0, **_bounded(timeout))

    def publish_owner(self, lease_id: str, owner: Owner) -> None:
        """Write the owner record into the lock blob's metadata (needs our lease)."""
        with translated("publish owner", self.key, owner.token):
            self._blob.set_blob_metadata(owner.to_metadata(), lease=lease_id, **self._options)

    def hand_over(self, lease_id: str, to_lease_id: str, token: int | None) -> None:
        """Change our lease to `to_lease_id`: its waiter holds the lease, nobody else can."""
        with translated("hand over", self.key, token):
            self._lease(lease_id).change(to_lease_id, **self._options)

    def release(self, lease_id: str, token: int | None) -> None:
        """Give the lease back so a waiter gets it now instead of at expiry."""
        with translated("release", self.key, token):
            self._lease(lease_id).release(**self._options)

    def read(self) -> LockState | None:
        """The lock's public state, or None when the key was never locked."""
        try:
            with translated("read", self.key):
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
