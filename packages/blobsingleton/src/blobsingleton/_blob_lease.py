"""Leases on Azure Blob Storage: one lock blob per key, fenced by its sequence number."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from blobsingleton import _defaults
from blobsingleton._connection import StorageAccount
from blobsingleton._events import emit_lease
from blobsingleton._keys import blob_name
from blobsingleton._lease import DEFAULT_PERIOD, DEFAULT_POLL_INTERVAL, BaseLease
from blobsingleton._lock_blob import LockBlob, LockBusy, LockState
from blobsingleton._owner import Owner
from blobsingleton.errors import LeaseError, LeaseLost

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient


class BlobLease(BaseLease):
    """A mutual-exclusion lease on `key`, stored as a blob lease.

    Steady-state cost of acquire + release: 3 requests (acquire lease, increment the fencing
    token, release). A fresh random lease id is used for every acquisition.
    """

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
    ) -> None:
        super().__init__(key, period=period, poll_interval=poll_interval, on_lost=on_lost)
        locks = _defaults.container(container, _defaults.LOCK_CONTAINER, storage)
        self._lock = LockBlob(locks, blob_name("", key), key)
        self._owner_template = owner or Owner()
        self.owner: Owner | None = None
        self._publish_at_acquire = publish_owner_at_acquire
        self._lease_id = ""

    def _try_acquire(self) -> int | None:
        lease_id = str(uuid.uuid4())
        try:
            self._lock.acquire(lease_id, self.period)
        except LockBusy:
            return None
        self._lease_id = lease_id
        try:
            token = self._lock.next_token(lease_id)
        except BaseException:
            self._give_back_quietly(lease_id)
            raise
        self.owner = Owner(
            instance=self._owner_template.instance,
            function=self._owner_template.function,
            invocation_id=self._owner_template.invocation_id,
            token=token,
        )
        if self._publish_at_acquire:
            self._lock.publish_owner(lease_id, self.owner)
        emit_lease("acquire", self)
        return token

    def _give_back_quietly(self, lease_id: str) -> None:
        """Release a lease we could not finish acquiring; if that fails too, it expires."""
        with contextlib.suppress(LeaseError):
            self._lock.release(lease_id, None)

    def _renew(self) -> None:
        self._lock.renew(self._lease_id, self._token or 0, timeout=self.period / 3)

    def _on_first_renewal(self) -> None:
        if self.owner is not None and not self._publish_at_acquire:
            self._lock.publish_owner(self._lease_id, self.owner)

    def _release(self) -> None:
        self._lock.release(self._lease_id, self.owner.token if self.owner else None)

    @property
    def lease_id(self) -> str:
        """The storage lease id of the current acquisition (needed to write the leased blob)."""
        return self._lease_id

    def read_state(self) -> LockState | None:
        """The lock's public state, as any other instance would see it (1 request)."""
        return self._lock.read()


def read_lock(
    key: str, *, container: ContainerClient | None = None, storage: StorageAccount | None = None
) -> LockState | None:
    """Who holds `key` now (if the owner record is current), its token and lease state."""
    locks = _defaults.container(container, _defaults.LOCK_CONTAINER, storage)
    return LockBlob(locks, blob_name("", key), key).read()
