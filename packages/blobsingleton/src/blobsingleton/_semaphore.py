"""Up to N holders of one key: N lock blobs ("slots"), each a lease of its own."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from blobsingleton._blob_lease import BlobLease
from blobsingleton._connection import StorageAccount
from blobsingleton._keys import validate_key
from blobsingleton._lease import DEFAULT_PERIOD, DEFAULT_POLL_INTERVAL, BaseLease
from blobsingleton._owner import Owner
from blobsingleton.errors import LeaseLost

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient


class LeaseSemaphore(BaseLease):
    """Hold one of `limit` slots of `key`. The token is the fencing token of the slot held."""

    def __init__(
        self,
        key: str,
        limit: int,
        *,
        period: float = DEFAULT_PERIOD,
        container: ContainerClient | None = None,
        storage: StorageAccount | None = None,
        owner: Owner | None = None,
        on_lost: Callable[[LeaseLost], None] | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> None:
        if limit < 1:
            raise ValueError(f"a semaphore needs a limit of at least 1, not {limit}")
        super().__init__(
            validate_key(key), period=period, poll_interval=poll_interval, on_lost=on_lost
        )
        self.limit = limit
        self._slots = [
            BlobLease(
                f"semaphores/{key}#slot{i}",
                period=period,
                container=container,
                storage=storage,
                owner=owner,
            )
            for i in range(limit)
        ]
        self.slot: int | None = None

    def _try_acquire(self) -> int | None:
        for i in random.sample(range(self.limit), self.limit):
            token = self._slots[i]._try_acquire()
            if token is not None:
                self.slot = i
                return token
        return None

    def _renew(self) -> None:
        self._held_slot()._renew()

    def _on_first_renewal(self) -> None:
        self._held_slot()._on_first_renewal()

    def _release(self) -> None:
        slot, self.slot = self._held_slot(), None
        slot._release()

    def _held_slot(self) -> BlobLease:
        assert self.slot is not None, "semaphore slot used while not held"
        return self._slots[self.slot]
