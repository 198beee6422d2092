"""Leases on Azure Blob Storage: one lock blob per key, fenced by its sequence number."""

from __future__ import annotations

import contextlib
import logging
import random
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from blobsingleton import _defaults
from blobsingleton._connection import StorageAccount
from blobsingleton._events import emit_lease
from blobsingleton._keys import blob_name
from blobsingleton._lease import DEFAULT_PERIOD, DEFAULT_POLL_INTERVAL, BaseLease
from blobsingleton._line import WaitingLine
from blobsingleton._lock_blob import LockBlob, LockBusy, LockState
from blobsingleton._namespace import namespace as resolve_namespace
from blobsingleton._owner import Owner
from blobsingleton.errors import LeaseError, LeaseLost

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient

log = logging.getLogger("blobsingleton")

#: How often the first waiter in line asks for the lease: bounds the handoff time.
HEAD_POLL = 0.2
#: The longest a waiter further back goes without looking at the line.
MAX_LINE_POLL = 2.0


class BlobLease(BaseLease):
    """A mutual-exclusion lease on `key`, stored as a blob lease.

    Steady-state cost of acquire + release: 3 requests (acquire lease, increment the fencing
    token, release). A fresh random lease id is used for every acquisition.

    `fair=True`: a blocking acquire that finds the key busy waits in line (see `_line`), and
    a release hands the lease to the first live waiter instead of freeing it, so waiters get
    the key in arrival order and promptly. Costs 1 more request per release (the line is
    listed), 3 per wait (ticket, entry, leaving); non-blocking attempts cost what they did.
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
        clock: Callable[[], float] = time.monotonic,
        fair: bool = False,
        namespace: str | None = None,
    ) -> None:
        super().__init__(
            key, period=period, poll_interval=poll_interval, on_lost=on_lost, clock=clock
        )
        locks = _defaults.container(container, _defaults.LOCK_CONTAINER, storage)
        #: Whose keys these are (default: BLOBSINGLETON_NAMESPACE, else the host id).
        self.namespace = resolve_namespace(namespace)
        self._candidates = [lock_blob(locks, self.namespace, name) for name in self._blobs()]
        self._lock = self._candidates[0]
        self.fair = fair
        line_blob = blob_name(self.namespace, key)
        self._line = WaitingLine(locks, line_blob, key, self.period) if fair else None
        self._ticket: int | None = None  # our place in line while a blocking acquire waits
        self._waiting_id = ""  # the lease id we stand in line with
        self._is_head = False
        self._refreshed_at = 0.0
        self._owner_template = owner or Owner()
        self.owner: Owner | None = None
        self._publish_at_acquire = publish_owner_at_acquire
        self._lease_id = ""

    def _blobs(self) -> Sequence[str]:
        """The lock blobs this lease may take, any one of them (one for a plain lease)."""
        return [self.key]

    def _try_acquire(self) -> int | None:
        if self._ticket is not None and not self._is_head:
            return None  # in line behind others: only the head asks for the lease
        lease_id = self._waiting_id if self._ticket is not None else str(uuid.uuid4())
        for lock in random.sample(self._candidates, len(self._candidates)):
            try:
                lock.acquire(lease_id, self.period)
            except LockBusy:
                continue
            self._lock = lock
            break
        else:
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
        token = self.owner.token if self.owner else None
        if self._line is not None:
            for entry in self._line.live():
                if entry.lease_id and entry.lease_id != self._lease_id:
                    self._lock.hand_over(self._lease_id, entry.lease_id, token)
                    log.debug("lease %s (token %s) handed to ticket %d", self.key, token,
                              entry.ticket)  # fmt: skip
                    return
        self._lock.release(self._lease_id, token)

    # -- waiting in line (fair=True) -----------------------------------------------------------
    def _next_delay(self, interval: float) -> float:
        if self._line is None:
            return super()._next_delay(interval)
        now = time.monotonic()
        if self._ticket is None:
            self._waiting_id = str(uuid.uuid4())
            self._ticket = self._line.join(self._waiting_id)
            self._refreshed_at = now
        elif now - self._refreshed_at > self.period / 3:
            self._line.refresh(self._ticket, self._waiting_id)
            self._refreshed_at = now
        if self._is_head:  # tickets only grow: nobody can get ahead of the head again
            return HEAD_POLL * random.uniform(0.8, 1.2)
        ahead = sum(1 for entry in self._line.live() if entry.ticket < self._ticket)
        if ahead == 0:
            self._is_head = True
            return 0.0  # just became first: the lease may already have been handed to us
        # Further back, look less often: the line moves one place per hold.
        return min(MAX_LINE_POLL, HEAD_POLL * ahead) * random.uniform(0.8, 1.2)

    def _stop_waiting(self) -> None:
        if self._line is None or self._ticket is None:
            return
        ticket, self._ticket, self._is_head = self._ticket, None, False
        try:
            self._line.leave(ticket)
        except LeaseError as error:  # the entry goes stale by itself within a period
            log.warning("lease %s: could not leave the line: %s", self.key, error)
        if self._token is None:
            # Gave up waiting: a holder may have handed us the lease meanwhile. Pass it on
            # rather than leave it to expire unrenewed (fails harmlessly if it is not ours).
            with contextlib.suppress(LeaseError):
                self._lock.release(self._waiting_id, None)

    @property
    def name(self) -> str:
        """The blob name of the lock this lease holds (or, before acquiring, would take)."""
        return self._lock.name

    @property
    def lease_id(self) -> str:
        """The storage lease id of the current acquisition (needed to write the leased blob)."""
        return self._lease_id

    def waiters(self) -> int:
        """How many live waiters stand in this key's line (0 unless `fair`): 1 request."""
        return len(self._line.live()) if self._line is not None else 0


def lock_blob(locks: ContainerClient, namespace: str, key: str) -> LockBlob:
    """The lock blob of `key` in `namespace`; a new one continues the token of the 0.2 blob."""
    return LockBlob(locks, blob_name(namespace, key), key, legacy_name=blob_name("", key))


def read_lock(
    key: str,
    *,
    container: ContainerClient | None = None,
    storage: StorageAccount | None = None,
    namespace: str | None = None,
) -> LockState | None:
    """Who holds `key` now (if the owner record is current), its token and lease state."""
    locks = _defaults.container(container, _defaults.LOCK_CONTAINER, storage)
    return lock_blob(locks, resolve_namespace(namespace), key).read()
