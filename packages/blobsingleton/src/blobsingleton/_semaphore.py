"""Up to N holders of one key: N lock blobs ("slots"), each a lease of its own."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from blobsingleton._blob_lease import BlobLease
from blobsingleton._connection import StorageAccount
from blobsingleton._keys import validate_key
from blobsingleton._lease import DEFAULT_PERIOD, DEFAULT_POLL_INTERVAL
from blobsingleton._owner import Owner
from blobsingleton.errors import LeaseLost

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient


class LeaseSemaphore(BlobLease):
    """Hold one of `limit` slots of `key`: a blob lease on whichever slot blob is free.

    The token is the fencing token of the slot held (each slot counts on its own).
    """

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
        clock: Callable[[], float] = time.monotonic,
        namespace: str | None = None,
    ) -> None:
        if limit < 1:
            raise ValueError(f"a semaphore needs a limit of at least 1, not {limit}")
        self.limit = limit
        super().__init__(
            validate_key(key), period=period, container=container, storage=storage,
            owner=owner, on_lost=on_lost, poll_interval=poll_interval, clock=clock,
            namespace=namespace,
        )  # fmt: skip

    def _blobs(self) -> Sequence[str]:
        return [self._slot_key(i) for i in range(self.limit)]

    def _slot_key(self, slot: int) -> str:
        return f"semaphores/{self.key}#slot{slot}"

    @property
    def slot(self) -> int | None:
        """Which slot this holder has, None when it holds none."""
        if self._token is None:
            return None
        return self._blobs().index(self._lock.key)
