"""Leases on Azure Blob Storage: one lock blob per key, fenced by its sequence number."""

from __future__ import annotations

import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING

from blobsingleton import _containers
from blobsingleton import _line as lines
from blobsingleton import _telemetry as telemetry
from blobsingleton._connection import StorageAccount
from blobsingleton._keys import blob_name, prefix
from blobsingleton._keys import namespace as resolve_namespace
from blobsingleton._lease import DEFAULT_PERIOD, DEFAULT_POLL_INTERVAL, BaseLease, paced
from blobsingleton._line import Entry, LineWait, WaitingLine
from blobsingleton._lock_blob import LockBlob, LockBusy, LockState
from blobsingleton._owner import Owner
from blobsingleton.errors import LeaseError, LeaseLost, StorageUnavailable

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient

log = logging.getLogger("blobsingleton")

#: A waiter seen in line this recently is handed the key without listing the line again.
SUCCESSOR_FRESH = 0.3


class BlobLease(BaseLease):
    """A mutual-exclusion lease on `key`, stored as a blob lease (a fresh lease id each time;
    what each step costs: the library's page).

    `fair=True`: a blocking acquire that finds the key busy waits in line, and a release hands
    the lease to the first live waiter, so waiters get the key in arrival order. A process that
    asks again at once may take up to `leases.TURNS_IN_A_ROW` turns in a row: with waiters
    behind it a release keeps the lease a moment for it. `scope`: a function's own keys
    (`@singleton(scope="function")`); None: the app's."""

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
        scope: str | None = None,
    ) -> None:
        super().__init__(
            key, period=period, poll_interval=poll_interval, on_lost=on_lost, clock=clock
        )
        locks = _containers.container(container, _containers.LOCK_CONTAINER, storage)
        #: Whose keys these are (default: BLOBSINGLETON_NAMESPACE, else the host id).
        self.namespace = resolve_namespace(namespace)
        name = blob_name(prefix(self.namespace, scope), key)
        self._lock = LockBlob(locks, name, key)
        self.fair = fair
        self._line = WaitingLine(locks, name, key, self.period) if fair else None
        self._memory_key = f"{getattr(locks, 'url', '')}/{name}"
        self._wait: LineWait | None = None  # a blocking acquire's place in line
        self._turns, self._turns_since = 0, 0.0  # turns in a row of this process (see _line)
        self._next: Entry | None = None  # the first waiter in line, as last seen
        self._next_seen_at = float("-inf")
        self._owner_template = owner or Owner()
        self.owner: Owner | None = None
        self._publish_at_acquire = publish_owner_at_acquire
        self._published = False
        self._lease_id = ""

    def _try_acquire(self) -> int | None:
        wait = self._wait
        in_line = wait is not None and wait.ticket is not None
        if self._line is not None and not in_line:
            memory = lines.memory(self._memory_key)
            if time.monotonic() - memory.released_at < lines.KEEP_FOR:
                memory.asks_again = True  # it would have taken a kept lease: keep again
            token = self._take_kept()
            if token is not None:
                return token
        if wait is not None and not in_line and wait.joins_at_once():
            wait.join()  # this process just handed the key on: an attempt could only fail
            return None
        if wait is not None and in_line:
            if not wait.asks():
                return None
            lease_id = wait.lease_id
        else:
            lease_id = str(uuid.uuid4())
        try:
            self._lock.acquire(lease_id, self.period)
        except LockBusy:
            return None
        self._turns, self._turns_since = 1, time.monotonic()
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
        telemetry.emit_lease("acquire", self)
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
        token = self.owner.token if self.owner else None
        if self._line is None:
            self._lock.release(self._lease_id, token)
            return
        if self._may_keep():
            successor = self._successor()
            if successor is not None:
                self._keep(successor, token)
                return
        self._hand_on(self._lease_id, token, self._successor(), turns_since=self._turns_since)

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
        self, lease_id: str, token: int | None, successor: Entry | None, turns_since: float | None
    ) -> None:
        """Change the lease to `successor`'s lease id (it holds the key now), or release it;
        `turns_since`: when this process's turns in a row began (None: it was only waiting)."""
        lines.memory(self._memory_key).released_at = time.monotonic()
        if successor is None:
            self._lock.release(lease_id, token)
            return
        self._lock.hand_over(lease_id, successor.lease_id, token)
        now = time.monotonic()
        held = None if turns_since is None else now - turns_since
        lines.memory(self._memory_key).handed(successor.ticket, now, held)
        log.debug("lease %s (token %s) handed to ticket %d", self.key, token, successor.ticket)

    def _may_keep(self) -> bool:
        now = time.monotonic()
        return (
            self._clock is time.monotonic
            and self._turns < lines.TURNS
            and now - self._turns_since < lines.TURNS_WITHIN
            and now - self._confirmed_at < self.period / 3 - 1.0
            and lines.memory(self._memory_key).asks_again
        )

    def _keep(self, successor: Entry, token: int | None) -> None:
        lease_id, turns_since = self._lease_id, self._turns_since
        hand_on = functools.partial(self._hand_on, lease_id, token, successor, turns_since)
        kept = lines.Kept(lease_id, self._confirmed_at, self._turns, turns_since, hand_on)
        kept.successor, kept.successor_seen_at = successor, self._next_seen_at
        lines.keep(self._memory_key, kept)

    def _take_kept(self) -> int | None:
        """Take the lease this process keeps for this key, if any: 1 request (the token)."""
        kept = lines.take(self._memory_key, time.monotonic(), self.period)
        if kept is None:
            return None
        try:
            token = self._lock.next_token(kept.lease_id)
        except LeaseError as error:  # expired or taken meanwhile: ask as anyone would
            log.debug("lease %s: kept lease gone: %s", self.key, error)
            return None
        except StorageUnavailable as error:  # may still be ours: hand it on, then ask
            log.warning("lease %s: kept lease not taken: %s", self.key, error)
            lines.hand_on(kept)
            return None
        self._confirmed_at = min(self._confirmed_at, kept.confirmed_at)  # renewed back then
        self._turns, self._turns_since = kept.turns + 1, kept.turns_since
        self._next, self._next_seen_at = kept.successor, kept.successor_seen_at
        return self._acquired(kept.lease_id, token)

    def _waits(
        self, timeout: float | None, blocking: bool, poll_interval: float | None
    ) -> Generator[float, None, None]:
        if self._line is None:
            return super()._waits(timeout, blocking, poll_interval)
        memory = lines.memory(self._memory_key)
        wait = self._wait = LineWait(self._line, memory, self.period, blocking)
        return self._in_line(wait, paced(self.key, self._clock, timeout, blocking, wait.next_delay))

    def _in_line(
        self, wait: LineWait, waits: Generator[float, None, None]
    ) -> Generator[float, None, None]:
        try:
            yield from waits
        finally:
            self._leave(wait)

    def _leave(self, wait: LineWait) -> None:
        """The acquire ended: leave the line; a waiter that gave up passes on a lease a holder
        may have handed it meanwhile (fails harmlessly, 2 requests, if it is not ours)."""
        if self._line is None or wait.ticket is None:
            return
        telemetry.annotate(line_ticket=wait.ticket, line_places=wait.joined_places)
        try:
            self._line.leave(wait.ticket)
        except LeaseError as error:  # the entry goes stale by itself within a period
            log.warning("lease %s: could not leave the line: %s", self.key, error)
        if self._token is None:
            with contextlib.suppress(LeaseError):
                self._next = None
                successor = next(
                    (e for e in self._line.live() if e.ticket != wait.ticket and e.lease_id), None
                )
                self._hand_on(wait.lease_id, None, successor, None)

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


def read_lock(
    key: str,
    *,
    container: ContainerClient | None = None,
    storage: StorageAccount | None = None,
    namespace: str | None = None,
    scope: str | None = None,
) -> LockState | None:
    """Who holds `key` now (if the owner record is current), its token and lease state."""
    locks = _containers.container(container, _containers.LOCK_CONTAINER, storage)
    named = prefix(resolve_namespace(namespace), scope)
    return LockBlob(locks, blob_name(named, key), key).read()
