"""Up to `limit` holders of one key: that many lock blobs ("slots"), each a lease of its own,
and one waiting line for the key (docs/internals.md)."""

from __future__ import annotations

import contextlib
import logging
import random
import uuid
from collections.abc import Callable, Generator
from typing import Unpack

from blobsingleton._blob_lease import BlobLease, LeaseOptions, LockBlob, WaitingLine
from blobsingleton._lease import check_limit, paced, slot_name
from blobsingleton._storage_errors import LockBusy
from blobsingleton.errors import LeaseError, StorageUnavailable

log = logging.getLogger("blobsingleton")


class _SlotWait:
    """A blocking acquire's place in the key's line. It asks for a slot only while fewer than
    `limit` live waiters stand before it, and a newcomer only while nobody waits, so a freed slot
    goes to one of the first `limit` waiters (arrival order, within that many)."""

    def __init__(
        self,
        line: WaitingLine,
        limit: int,
        period: float,
        interval: float,
        clock: Callable[[], float],
    ) -> None:
        self.line, self.limit, self.period, self.interval = line, limit, period, interval
        self.clock = clock  # the lease's
        self.ticket: int | None = None
        self.lease_id = str(uuid.uuid4())
        self._refreshed_at = 0.0

    def may_ask(self) -> bool:
        """Whether this attempt may ask for a slot (1 request: the line's listing)."""
        live = self.line.live()
        if self.ticket is None:
            return not live
        return sum(1 for entry in live if entry.ticket < self.ticket) < self.limit

    def next_delay(self) -> float:
        """Seconds until the next attempt; joins the line at the first (2 requests) and keeps
        the entry alive (1 request a third of a period)."""
        now = self.clock()
        if self.ticket is None:
            self.ticket = self.line.join(self.lease_id)
            self._refreshed_at = now
        elif now - self._refreshed_at > self.period / 3:
            self.line.refresh(self.ticket, self.lease_id)
            self._refreshed_at = now
        return self.interval * random.uniform(0.5, 1.5)

    def leave(self) -> None:
        if self.ticket is None:
            return
        try:
            self.line.leave(self.ticket)
        except LeaseError as error:  # the entry goes stale by itself within a period
            log.warning("lease %s: could not leave the line: %s", self.line.key, error)


class LeaseSemaphore(BlobLease):
    """A lease that up to `limit` holders have at once: slot `i` of `key` is a blob lease of its
    own, so each holder has the renewal, loss signal and fencing token of a `BlobLease` (the
    token counts per slot). An attempt asks the slots from a random one on (one request each,
    until one is free). `fair=True`: blocking waiters stand in the key's line and a freed slot
    goes to one of the first `limit` of them; a newcomer takes a free slot only while nobody
    waits (one more request per attempt: the line's listing)."""

    def __init__(
        self, key: str, limit: int, *, fair: bool = False, **options: Unpack[LeaseOptions]
    ) -> None:
        super().__init__(key, **options)
        self.limit = check_limit(limit)
        base = self._lock
        container = base.container
        self._slots = [LockBlob(container, slot_name(base.name, i), key) for i in range(limit)]
        self._lock = self._slots[0]
        self._slot_line = WaitingLine(container, base.name, key, self.period) if fair else None
        self._slot_wait: _SlotWait | None = None
        #: The slot this holder has (None when it holds none).
        self.slot: int | None = None

    def _try_acquire(self) -> int | None:
        wait = self._slot_wait
        if wait is not None and not wait.may_ask():
            return None
        lease_id = str(uuid.uuid4())
        count = len(self._slots)
        first = random.randrange(count)
        for step in range(count):
            slot = (first + step) % count
            try:
                self._slots[slot].acquire(lease_id, self.period)
            except LockBusy:
                continue
            self._lock, self.slot = self._slots[slot], slot
            return self._acquired(lease_id)
        return None

    def _release(self) -> None:
        self.slot = None
        super()._release()

    def _waits(
        self, timeout: float | None, blocking: bool, poll_interval: float | None
    ) -> Generator[float, None, None]:
        self._slot_wait = None
        if self._slot_line is None or not blocking:
            return super()._waits(timeout, blocking, poll_interval)
        interval = poll_interval or self.poll_interval
        wait = self._slot_wait = _SlotWait(
            self._slot_line, self.limit, self.period, interval, self._clock
        )
        waits = paced(self.key, self._clock, timeout, blocking, wait.next_delay)
        return self._in_slot_line(wait, waits)

    def _in_slot_line(
        self, wait: _SlotWait, waits: Generator[float, None, None]
    ) -> Generator[float, None, None]:
        try:
            yield from waits
        finally:
            self._slot_wait = None
            with contextlib.suppress(StorageUnavailable):
                wait.leave()

    def waiters(self) -> int:
        """How many live waiters stand in this key's line (0 unless `fair`): 1 request."""
        return len(self._slot_line.live()) if self._slot_line is not None else 0

    def holders(self) -> int:
        """How many slots are leased now (1 request per slot)."""
        return sum(1 for slot in self._slots if (state := slot.read()) is not None and state.leased)
