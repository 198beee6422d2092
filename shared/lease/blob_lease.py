"""Leases on Azure Blob Storage: one lock blob per key, fenced by its sequence number."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from typing import Any

from shared import settings, storage
from shared.lease.base import DEFAULT_PERIOD, DEFAULT_POLL_INTERVAL, BaseLease
from shared.lease.errors import LeaseError, LeaseLost
from shared.lease.keys import blob_name
from shared.lease.lock_blob import LockBlob, LockBusy, LockState
from shared.lease.owner import Owner

DEFAULT_CONTAINER = "locks"


def lock_container(container: str | None, connection: str) -> Any:
    """The container client for lock blobs: `container`, else app setting LEASE_CONTAINER."""
    name = container or settings.setting("LEASE_CONTAINER", DEFAULT_CONTAINER)
    return storage.blob_service(connection).get_container_client(name)


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
        container: str | None = None,
        connection: str = "AzureWebJobsStorage",
        owner: Owner | None = None,
        on_lost: Callable[[LeaseLost], None] | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        publish_owner_at_acquire: bool = False,
        _blob_prefix: str = "",
    ) -> None:
        super().__init__(key, period=period, poll_interval=poll_interval, on_lost=on_lost)
        self._lock = LockBlob(
            lock_container(container, connection), blob_name(_blob_prefix, key), key
        )
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
    key: str, *, container: str | None = None, connection: str = "AzureWebJobsStorage"
) -> LockState | None:
    """Who holds `key` now (if the owner record is current), its token and lease state."""
    return LockBlob(lock_container(container, connection), blob_name("", key), key).read()
