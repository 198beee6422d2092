"""Leases on Azure Blob Storage: one lock blob per key, fenced by its sequence number."""

from __future__ import annotations

import contextlib
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from blobsingleton import _defaults, _keep
from blobsingleton._connection import StorageAccount
from blobsingleton._events import emit_lease
from blobsingleton._keys import blob_name
from blobsingleton._lease import DEFAULT_PERIOD, DEFAULT_POLL_INTERVAL, BaseLease
from blobsingleton._line import Entry, WaitingLine
from blobsingleton._lock_blob import LockBlob, LockBusy, LockState
from blobsingleton._namespace import namespace as resolve_namespace
from blobsingleton._owner import Owner
from blobsingleton.errors import LeaseError, LeaseLost, StorageUnavailable

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient

log = logging.getLogger("blobsingleton")

#: How often a waiter whose place has come up asks for the lease: bounds the handoff time.
HEAD_POLL = 0.05
#: The longest a waiter next in line goes without asking (while a long hold runs on).
MAX_LINE_POLL = 1.0
#: The longest a waiter further back goes without looking at the line.
MAX_LINE_LOOK = 2.0
#: A line that has not moved for this many places' time stands still (a long hold).
STALLED = 3.0
#: A waiter this many places back or fewer plans its looks closely (see `_plan`).
NEAR = 3
#: A waiter further back looks at the line again when the places before it, but the holder's,
#: should have gone, and this share of the holder's turn too (the holder may be nearly done).
EARLY_LOOK = 0.5
#: A waiter seen in line this recently is handed the key without listing the line again.
SUCCESSOR_FRESH = 0.3


class BlobLease(BaseLease):
    """A mutual-exclusion lease on `key`, stored as a blob lease.

    Steady-state cost of acquire + release: 3 requests (acquire lease, increment the fencing
    token, release). A fresh random lease id is used for every acquisition.

    `fair=True`: a blocking acquire that finds the key busy waits in line (see `_line`), and
    a release hands the lease to the first live waiter instead of freeing it, so waiters get
    the key in arrival order and promptly. A process may take up to `_keep.TURNS` turns in a
    row (within `_keep.TURNS_WITHIN` s) while others wait: with waiters behind it a release
    keeps the lease `_keep.KEEP_FOR` s for this process's next ask, which then costs one
    request (its fencing token). Costs 1 more request per release (the line is listed) and
    about 4 to 8 per wait (ticket, entry, a look or two, its asks, leaving), shared by the
    turns taken in a row; non-blocking attempts cost what they did.
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
        self._memory_key = f"{getattr(locks, 'url', '')}/{line_blob}"
        self._ticket: int | None = None  # our place in line while a blocking acquire waits
        self._waiting_id = ""  # the lease id we stand in line with
        self._refreshed_at = 0.0
        self._joined_at = 0.0
        self._probes = 0  # Acquire Lease requests sent with our ticket's lease id
        self._places = 1  # places before ours when we joined (the holder's included)
        self._turn_at = 0.0  # monotonic: when our place should come up
        self._looks = 0  # listings of the line during this wait
        self._looked_at = 0.0  # monotonic: when `_places` was last measured
        self._holder_since = 0.0  # monotonic: about when the holder before us took over
        self._probe_next = True  # the next wake asks for the lease (else it lists the line)
        self._look_due = False
        self._overdue_from = 0.0  # monotonic: the next in line backs off past this
        self._moved_at = 0.0  # monotonic: when our place last moved up (or we joined)
        self._blocking = True
        self._turns, self._turns_since = 0, 0.0  # turns in a row of this process (see _keep)
        self._kept_confirmed_at = float("inf")
        self._next: Entry | None = None  # the first waiter in line, as last seen
        self._next_seen_at = float("-inf")
        self._owner_template = owner or Owner()
        self.owner: Owner | None = None
        self._publish_at_acquire = publish_owner_at_acquire
        self._lease_id = ""

    def _blobs(self) -> Sequence[str]:
        """The lock blobs this lease may take, any one of them (one for a plain lease)."""
        return [self.key]

    def _try_acquire(self) -> int | None:
        self._kept_confirmed_at = float("inf")
        if self._line is not None and self._ticket is None:
            memory = _keep.memory(self._memory_key)
            if time.monotonic() - memory.released_at < _keep.KEEP_FOR:
                memory.asks_again = True  # it would have taken a kept lease: keep again
        token = self._take_kept()
        if token is not None:
            return token
        if self._ticket is None and self._joins_at_once():
            self._join()  # this process just handed the key on: an attempt could only fail
            return None
        lease_id = self._waiting_id if self._ticket is not None else str(uuid.uuid4())
        if self._ticket is not None:
            self._look_due = True  # unless it gets the lease, this wake looks at the line
            if not self._probe_next:
                return None
            self._probes += 1
        for lock in random.sample(self._candidates, len(self._candidates)):
            try:
                lock.acquire(lease_id, self.period)
            except LockBusy:
                continue
            self._lock = lock
            break
        else:
            return None
        self._turns, self._turns_since = 1, time.monotonic()
        return self._acquired(lease_id, fence=True)

    def _acquired(self, lease_id: str, *, fence: bool, token: int | None = None) -> int:
        """Finish an acquisition under `lease_id`: fencing token, owner record, event."""
        self._lease_id = lease_id
        if fence:
            try:
                token = self._lock.next_token(lease_id)
            except BaseException:
                self._give_back_quietly(lease_id)
                raise
        assert token is not None
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

    def _confirmed_since(self, sent_at: float) -> float:
        return min(sent_at, self._kept_confirmed_at)

    def _renew(self) -> None:
        self._lock.renew(self._lease_id, self._token or 0, timeout=self.period / 3)

    def _on_first_renewal(self) -> None:
        if self.owner is not None and not self._publish_at_acquire:
            self._lock.publish_owner(self._lease_id, self.owner)

    def _release(self) -> None:
        token = self.owner.token if self.owner else None
        if self._line is None:
            self._lock.release(self._lease_id, token)
            return
        if self._may_keep():
            successor = self._successor()
            if successor is not None:
                self._keep(successor, token)
                return
        self._hand_on(
            self._lock, self._lease_id, token, self._successor(), turns_since=self._turns_since
        )

    def _successor(self) -> Entry | None:
        """The first live waiter in line (1 request), or the one seen a moment ago."""
        assert self._line is not None
        now = time.monotonic()
        if now - self._next_seen_at <= SUCCESSOR_FRESH:
            return self._next
        self._next, self._next_seen_at = None, now
        for entry in self._line.live():
            if entry.lease_id and entry.lease_id != self._lease_id:
                self._next = entry
                break
        return self._next

    def _hand_on(
        self,
        lock: LockBlob,
        lease_id: str,
        token: int | None,
        successor: Entry | None,
        *,
        turns_since: float | None = None,
    ) -> None:
        """Change the lease to `successor`'s lease id (it holds the key now), or release it."""
        _keep.memory(self._memory_key).released_at = time.monotonic()
        if successor is None:
            lock.release(lease_id, token)
            return
        lock.hand_over(lease_id, successor.lease_id, token)
        now = time.monotonic()
        held = None if turns_since is None else now - turns_since
        _keep.memory(self._memory_key).handed(successor.ticket, now, held)
        log.debug("lease %s (token %s) handed to ticket %d", self.key, token, successor.ticket)

    # -- a process taking turns in a row while others wait (see _keep) ---------------------------
    def _may_keep(self) -> bool:
        now = time.monotonic()
        return (
            len(self._candidates) == 1
            and self._clock is time.monotonic
            and self._turns < _keep.TURNS
            and now - self._turns_since < _keep.TURNS_WITHIN
            and now - self._confirmed_at < self.period / 3 - 1.0
            and _keep.memory(self._memory_key).asks_again
        )

    def _keep(self, successor: Entry, token: int | None) -> None:
        lock, lease_id = self._lock, self._lease_id

        turns_since = self._turns_since

        def hand_on() -> None:
            self._hand_on(lock, lease_id, token, successor, turns_since=turns_since)

        kept = _keep.Kept(lease_id, self._confirmed_at, self._turns, self._turns_since, hand_on)
        kept.successor, kept.successor_seen_at = successor, self._next_seen_at
        _keep.keep(self._memory_key, kept)

    def _take_kept(self) -> int | None:
        """Take the lease this process keeps for this key, if any: 1 request (the token)."""
        if self._line is None or len(self._candidates) != 1 or self._ticket is not None:
            return None
        kept = _keep.take(self._memory_key, time.monotonic(), self.period)
        if kept is None:
            return None
        try:
            token = self._lock.next_token(kept.lease_id)
        except LeaseError as error:  # expired or taken meanwhile: ask as anyone would
            log.debug("lease %s: kept lease gone: %s", self.key, error)
            return None
        except StorageUnavailable as error:  # may still be ours: hand it on, then ask
            log.warning("lease %s: kept lease not taken: %s", self.key, error)
            _keep.hand_on(kept)
            return None
        self._kept_confirmed_at = kept.confirmed_at
        self._turns, self._turns_since = kept.turns + 1, kept.turns_since
        self._next, self._next_seen_at = kept.successor, kept.successor_seen_at
        return self._acquired(kept.lease_id, fence=False, token=token)

    # -- waiting in line (fair=True) -----------------------------------------------------------
    def _waits(
        self, timeout: float | None, blocking: bool, poll_interval: float | None
    ) -> Iterator[float]:
        self._blocking = blocking
        return super()._waits(timeout, blocking, poll_interval)

    def _joins_at_once(self) -> bool:
        return (
            self._line is not None
            and self._blocking
            and _keep.memory(self._memory_key).busy(time.monotonic())
        )

    def _join(self) -> None:
        """Take a ticket and stand in line (2 requests), then plan the first look."""
        assert self._line is not None
        now = time.monotonic()
        self._waiting_id = str(uuid.uuid4())
        self._ticket = self._line.join(self._waiting_id)
        self._joined_at = self._refreshed_at = self._moved_at = now
        self._probes, self._looks, self._looked_at = 0, 0, 0.0
        places = _keep.memory(self._memory_key).places_ahead(self._ticket, now)
        if places is None:
            self._look()  # no handoff of ours to count from: look at the line (1 request)
        else:  # the ticket we just handed to holds the key since a moment ago
            self._places, self._looked_at, self._holder_since = places, now, now
        self._plan()

    def _look(self) -> None:
        """List the line: the places before ours, the holder's included (1 request)."""
        assert self._line is not None and self._ticket is not None
        now = time.monotonic()
        places = 1 + sum(1 for entry in self._line.live() if entry.ticket < self._ticket)
        if self._looked_at:
            _keep.memory(self._memory_key).moved(self._places - places, now - self._looked_at)
            if places < self._places:
                self._moved_at = now
        if places == 1:  # next: the holder took over since our last look at the earliest
            self._holder_since = self._looked_at or now
        self._places, self._looked_at = places, now
        self._looks += 1

    def _plan(self) -> None:
        """When our place should come up, and whether the next wake asks for the lease."""
        memory = _keep.memory(self._memory_key)
        if self._places <= 1:  # the holder's turn: about as long as our own turns take
            self._turn_at = self._holder_since + memory.per_place
            # Back off only once its turn ran past that, counted from when we saw we are next
            # (it may have taken over any time before): a head never sleeps through a handoff.
            self._overdue_from = self._looked_at + memory.per_place
            self._probe_next = True
            return
        # Far back: look again about NEAR places before ours, at four fifths of the pace the
        # line was seen moving (handoffs included). Close: when we may be next, at that pace or
        # our own turns' if faster. Sleeping past our turn would idle the key.
        seen = memory.pace or memory.per_place
        if self._places > NEAR:
            self._turn_at = self._looked_at + (self._places - NEAR) * seen * 0.8
        else:
            pace = min(seen, memory.per_place)
            self._turn_at = self._looked_at + (self._places - 2 + EARLY_LOOK) * pace
        # A line standing still for a period: whoever is ahead may be dead, holding a lease
        # handed to it that expires unrenewed while its entry still looks live. Ask for the
        # lease too then (it is free once that lease expired).
        self._probe_next = time.monotonic() - self._moved_at > self.period

    def _next_delay(self, interval: float) -> float:
        if self._line is None:
            return super()._next_delay(interval)
        if self._ticket is None:
            self._join()
        elif time.monotonic() - self._refreshed_at > self.period / 3:
            self._line.refresh(self._ticket, self._waiting_id)
            self._refreshed_at = time.monotonic()
        elif self._places > 1 and self._look_due:  # woke without the lease: where are we?
            self._look()
            self._plan()
        self._look_due = False
        now = time.monotonic()
        if self._places > 1:  # not before the plan; less often while the line stands still
            memory = _keep.memory(self._memory_key)
            stalled = now - self._moved_at
            if stalled < STALLED * (memory.pace or memory.per_place):
                stalled = 0.0  # moving as usual: a place may come up any time
            wake = max(self._turn_at, self._looked_at + stalled)
            longest = MAX_LINE_POLL if self._probe_next else MAX_LINE_LOOK
            return min(longest, max(0.0, wake - now))
        # Next in line: ask shortly before the holder's turn should end, then every
        # HEAD_POLL, backing off while it runs past the estimate (a long hold).
        if now < self._turn_at - HEAD_POLL:
            return min(MAX_LINE_POLL, self._turn_at - HEAD_POLL - now)
        overdue = max(0.0, now - self._overdue_from)
        return min(MAX_LINE_POLL, max(HEAD_POLL, overdue)) * random.uniform(0.8, 1.2)

    def _stop_waiting(self) -> None:
        if self._line is None or self._ticket is None:
            return
        ticket, self._ticket = self._ticket, None
        try:
            self._line.leave(ticket)
        except LeaseError as error:  # the entry goes stale by itself within a period
            log.warning("lease %s: could not leave the line: %s", self.key, error)
        if self._token is None:
            # Gave up waiting: a holder may have handed us the lease meanwhile. Pass it on
            # to the next in line (fails harmlessly, 2 requests, if it is not ours).
            with contextlib.suppress(LeaseError):
                self._next = None
                self._hand_on(self._lock, self._waiting_id, None, self._successor_for(ticket))

    def _successor_for(self, ticket: int) -> Entry | None:
        assert self._line is not None
        return next((e for e in self._line.live() if e.ticket != ticket and e.lease_id), None)

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
