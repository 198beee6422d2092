"""Fair waiting: `FairLease`, a `BlobLease` whose waiters get the key in arrival order, and
`LineMemory`, what its owner remembers of the lines it waits in (docs/internals.md)."""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import threading
import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import ClassVar, Unpack

from blobsingleton import _shutdown as shutdown
from blobsingleton import _telemetry as telemetry
from blobsingleton._blob_lease import BlobLease, Entry, LeaseOptions, WaitingLine
from blobsingleton._lease import paced
from blobsingleton.errors import LeaseError, StorageUnavailable

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
#: The share of the holder's turn a close waiter counts before looking again (it may end early).
EARLY_LOOK = 0.5
#: How long a fair holder with waiters keeps its lease after release for its own process.
KEEP_FOR = 0.03
#: The most turns in a row one process takes while others wait, and within how many seconds.
TURNS = 4
TURNS_WITHIN = 0.5
#: How long "this process handed the key on" counts as "the line is busy".
LINE_MEMORY = 1.0
#: A place in line until a process has measured its own (seconds).
FIRST_PER_PLACE = 0.2
#: What a handoff adds to a place in line: the next waiter's ask and its fencing token.
HANDOFF = 0.03
#: A waiter seen in line this recently is handed the key without listing the line again.
SUCCESSOR_FRESH = 0.3
#: A release after a quiet this long lists no line unless its acquire met one: the first of a
#: line asks at least every `MAX_LINE_POLL` (jittered up to 1.2 times), so it would have taken
#: the key freed meanwhile. A turn after a shorter pause may have a line behind it that could not.
QUIET = 2 * MAX_LINE_POLL


class FairLease(BlobLease):
    """A `BlobLease` whose blocking acquire that finds the key busy waits in the key's line,
    and whose release hands the lease to the first live waiter: waiters get the key in arrival
    order (what `@singleton(busy=Busy.wait())` takes). A process that asks again at once may
    take up to `leases.TURNS_IN_A_ROW` turns in a row: with waiters behind it a release keeps
    the lease a moment for it. Every time it plans with is on `clock`.

    `memory`: what it remembers of the key's line and the leases kept for the next turn
    (default: the process's, shared by every `FairLease` built without one). `look_always`:
    every release lists the line (1 request); False, only a release whose acquire met a line,
    or that follows this memory's last release of the key within `QUIET` (what `@singleton`
    takes: an uncontended call is acquire, token, release)."""

    def __init__(
        self,
        key: str,
        *,
        memory: LineMemory | None = None,
        look_always: bool = True,
        **options: Unpack[LeaseOptions],
    ) -> None:
        super().__init__(key, **options)
        self._memory = memory or LineMemory.of_process()
        self._memory_key = f"{getattr(self._lock.container, 'url', '')}/{self._lock.name}"
        self._known = self._memory.known(self._memory_key)  # what it knows of this key's line
        self._look_always = look_always
        self._met_line = False  # this acquisition met a line (it waited, or took a kept lease)
        self._wait: LineWait | None = None  # a blocking acquire's place in line
        self._blocking = True
        self._turns, self._turns_since = 0, 0.0  # this process's turns in a row, since when
        self._next: Entry | None = None  # the first waiter in line, as last seen
        self._next_seen_at = float("-inf")

    @functools.cached_property
    def _line(self) -> WaitingLine:
        """The key's waiting line in storage (made when first met: an uncontended turn has none)."""
        return WaitingLine(self._lock.container, self._lock.name, self.key, self.period)

    # -- acquire: wait in line, take a lease this process kept, or ask ---------------------------
    def _waits(
        self, timeout: float | None, blocking: bool, poll_interval: float | None
    ) -> Generator[float, None, None]:
        now, known = self._clock(), self._known
        self._met_line = known.busy(now) or now - known.released_at < QUIET
        self._wait, self._blocking = None, blocking  # a place in line once the first ask failed
        return self._in_line(timeout, blocking)

    def _in_line(self, timeout: float | None, blocking: bool) -> Generator[float, None, None]:
        """The waits after the first attempt, in line (run from the first wait on)."""
        wait = self._wait or self._place_in_line()
        try:
            yield from paced(self.key, self._clock, timeout, blocking, wait.next_delay)
        finally:
            self._leave(wait)

    def _place_in_line(self) -> LineWait:
        self._wait = LineWait(self._line, self._known, self.period, self._clock)
        return self._wait

    def _try_acquire(self) -> int | None:
        wait = self._wait
        if wait is not None and wait.ticket is not None:  # in line: ask when the plan says so
            self._met_line = True
            return self._first_turn(wait.lease_id) if wait.asks() else None
        if self._clock() - self._known.released_at < KEEP_FOR:
            self._known.asks_again = True  # it would have taken a kept lease: keep again
        token = self._take_kept()
        if token is not None:
            return token
        if self._blocking and self._known.busy(self._clock()):
            self._place_in_line().join()  # this process just handed the key on: an ask would fail
            return None
        return self._first_turn(str(uuid.uuid4()))

    def _first_turn(self, lease_id: str) -> int | None:
        """Ask with `lease_id`; once held, this process's turns in a row start over."""
        token = self._ask(lease_id)
        if token is not None:
            self._turns, self._turns_since = 1, self._clock()
        return token

    def _take_kept(self) -> int | None:
        """Take the lease this process keeps for this key, if any: 1 request (the token)."""
        kept = self._memory.take_kept(self._memory_key, self._clock(), self.period)
        if kept is None:
            return None
        self._met_line = True  # kept only with a waiter behind it
        try:
            token = self._lock.next_token(kept.lease_id)
        except LeaseError as error:  # expired or taken meanwhile: ask as anyone would
            log.debug("lease %s: kept lease gone: %s", self.key, error)
            return None
        except StorageUnavailable as error:  # may still be ours: hand it on, then ask
            log.warning("lease %s: kept lease not taken: %s", self.key, error)
            _hand_on_kept(kept)
            return None
        self._confirmed_at = min(self._confirmed_at, kept.confirmed_at)  # renewed back then
        self._turns, self._turns_since = kept.turns + 1, kept.turns_since
        self._next, self._next_seen_at = kept.successor, kept.successor_seen_at
        return self._acquired(kept.lease_id, token)

    def _leave(self, wait: LineWait) -> None:
        """The acquire ended: leave the line; a waiter that gave up passes on a lease a holder
        may have handed it meanwhile (fails harmlessly, 2 requests, if it is not ours)."""
        if wait.ticket is None:
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

    # -- release: keep the lease for this process's next turn, or hand it on --------------------
    def _release(self) -> None:
        token = self._released_token()
        if not (self._look_always or self._met_line):  # no line met: acquire, token, release
            self._hand_on(self._lease_id, token, None, turns_since=self._turns_since)
            return
        if self._may_keep():
            successor = self._successor()
            if successor is not None:
                self._keep_for_next_turn(successor, token)
                return
        self._hand_on(self._lease_id, token, self._successor(), turns_since=self._turns_since)

    def _may_keep(self) -> bool:
        now = self._clock()
        return (
            self._turns < TURNS
            and now - self._turns_since < TURNS_WITHIN
            and now - self._confirmed_at < self.period / 3 - 1.0
            and self._known.asks_again
        )

    def _successor(self) -> Entry | None:
        """The first live waiter in line (1 request), or the one seen a moment ago."""
        now = self._clock()
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
        self._known.released_at = self._clock()
        if successor is None:
            self._lock.release(lease_id, token)
            return
        self._lock.hand_over(lease_id, successor.lease_id, token)
        now = self._clock()
        self._known.handed(
            successor.ticket, now, None if turns_since is None else now - turns_since
        )
        log.debug("lease %s (token %s) handed to ticket %d", self.key, token, successor.ticket)

    def _keep_for_next_turn(self, successor: Entry, token: int | None) -> None:
        lease_id, turns_since = self._lease_id, self._turns_since
        hand_on = functools.partial(self._hand_on, lease_id, token, successor, turns_since)
        kept = Kept(lease_id, self._confirmed_at, self._turns, turns_since, hand_on)
        kept.successor, kept.successor_seen_at = successor, self._next_seen_at
        self._memory.keep_for_next_turn(self._memory_key, kept)

    def waiters(self) -> int:
        """How many live waiters stand in this key's line: 1 request."""
        return len(self._line.live())


class LineWait:
    """One blocking acquire's place in a key's line, and when it next asks or looks."""

    def __init__(
        self,
        line: WaitingLine,
        memory: KnownLine,
        period: float,
        clock: Callable[[], float],
    ) -> None:
        self.line, self.memory, self.period = line, memory, period
        self.clock = clock  # the lease's: every time below is on it
        self.ticket: int | None = None  # our place in line, once joined
        self.lease_id = ""  # the lease id we stand in line with
        self._refreshed_at = self._looked_at = self._moved_at = 0.0  # on `clock`
        self.joined_places = 0
        self._places = 1  # places before ours (the holder's included)
        self._turn_at = 0.0  # on `clock`: when our place should come up
        self._holder_since = 0.0  # on `clock`: about when the holder before us took over
        self._overdue_from = 0.0  # on `clock`: the next in line backs off past this
        self._probe_next = True  # the next wake asks for the lease (else it lists the line)
        self._look_due = False

    def asks(self) -> bool:
        """Whether this wake asks for the lease; if it does not get it, the next looks."""
        self._look_due = True
        return self._probe_next

    def join(self) -> None:
        """Take a ticket and stand in line (2 requests), then plan the first look."""
        now = self.clock()
        self.lease_id = str(uuid.uuid4())
        self.ticket = self.line.join(self.lease_id)
        self._refreshed_at = self._moved_at = now
        self._looked_at = 0.0
        places = self.memory.places_ahead(self.ticket, now)
        if places is None:
            self._look()  # no handoff of ours to count from: look at the line (1 request)
        else:  # the ticket we just handed to holds the key since a moment ago
            self._places, self._looked_at, self._holder_since = places, now, now
        self._plan()
        self.joined_places = self._places  # places before ours, the holder's included

    def _look(self) -> None:
        """List the line: the places before ours, the holder's included (1 request)."""
        assert self.ticket is not None
        now = self.clock()
        places = 1 + sum(1 for entry in self.line.live() if entry.ticket < self.ticket)
        if self._looked_at:
            self.memory.moved(self._places - places, now - self._looked_at)
            if places < self._places:
                self._moved_at = now
        if places == 1:  # next: the holder took over since our last look at the earliest
            self._holder_since = self._looked_at or now
        self._places, self._looked_at = places, now

    def _plan(self) -> None:
        """When our place should come up, and whether the next wake asks for the lease."""
        memory = self.memory
        if self._places <= 1:  # the holder's turn: about as long as our own turns take
            self._turn_at = self._holder_since + memory.per_place
            # Back off from when we saw we are next: a head never sleeps through a handoff.
            self._overdue_from = self._looked_at + memory.per_place
            self._probe_next = True
            return
        # Far back: look NEAR places early; close: when we may be next (docs/internals.md).
        seen = memory.pace or memory.per_place
        if self._places > NEAR:
            self._turn_at = self._looked_at + (self._places - NEAR) * seen * 0.8
        else:
            pace = min(seen, memory.per_place)
            self._turn_at = self._looked_at + (self._places - 2 + EARLY_LOOK) * pace
        # Line still for a period: a waiter ahead may be dead, its lease expiring. Ask too.
        self._probe_next = self.clock() - self._moved_at > self.period

    def next_delay(self) -> float:
        """Seconds until the next wake (joining the line at the first)."""
        if self.ticket is None:
            self.join()
        elif self.clock() - self._refreshed_at > self.period / 3:
            self.line.refresh(self.ticket, self.lease_id)
            self._refreshed_at = self.clock()
        elif self._places > 1 and self._look_due:  # woke without the lease: where are we?
            self._look()
            self._plan()
        self._look_due = False
        now = self.clock()
        if self._places > 1:  # not before the plan; less often while the line stands still
            stalled = now - self._moved_at
            if stalled < STALLED * (self.memory.pace or self.memory.per_place):
                stalled = 0.0  # moving as usual: a place may come up any time
            wake = max(self._turn_at, self._looked_at + stalled)
            longest = MAX_LINE_POLL if self._probe_next else MAX_LINE_LOOK
            return min(longest, max(0.0, wake - now))
        # Next in line: ask just before the holder's turn should end, then back off from HEAD_POLL.
        if now < self._turn_at - HEAD_POLL:
            return min(MAX_LINE_POLL, self._turn_at - HEAD_POLL - now)
        overdue = max(0.0, now - self._overdue_from)
        return min(MAX_LINE_POLL, max(HEAD_POLL, overdue)) * random.uniform(0.8, 1.2)


@dataclass
class KnownLine:
    """What a `LineMemory` knows of one key's line (docs/internals.md)."""

    handed_at: float = float("-inf")  # times on the clock of the process's leases
    handed_ticket: int | None = None
    per_place: float = FIRST_PER_PLACE  # from this process's own turns: when to ask
    asks_again: bool = True  # this process asks again within KEEP_FOR of a release
    released_at: float = float("-inf")  # its last release (or handoff) of the key
    pace: float | None = None  # seconds per place, as seen moving: when to look again

    def busy(self, now: float) -> bool:
        """This process handed the key on to a waiter a moment ago."""
        return now - self.handed_at < LINE_MEMORY

    def places_ahead(self, ticket: int, now: float) -> int | None:
        """Places before `ticket`, counted from the ticket this process just handed to."""
        if self.handed_ticket is None or not self.busy(now) or ticket <= self.handed_ticket:
            return None
        return ticket - self.handed_ticket

    def moved(self, places: int, seconds: float) -> None:
        """A waiter saw the line move `places` places in `seconds` between two looks."""
        if places >= 1 and seconds > 0:
            sample = seconds / places
            self.pace = sample if self.pace is None else 0.5 * self.pace + 0.5 * sample

    def handed(self, ticket: int, now: float, held: float | None) -> None:
        """This process handed the key to `ticket` after `held` s of turns (None: it gave up
        waiting): a place in line takes about as long, plus the handoff."""
        self.handed_at, self.handed_ticket = now, ticket
        if held is not None:
            sample = held + HANDOFF
            self.per_place = min(max(0.7 * self.per_place + 0.3 * sample, 0.01), 30.0)


@dataclass
class Kept:
    """A lease released by a fair holder of this process, kept for the next turn."""

    lease_id: str
    confirmed_at: float  # on the lease's clock: when the service last confirmed it
    turns: int  # turns taken in a row by this process, including the one just released
    turns_since: float  # on the lease's clock: when the first of them began
    hand_on: Callable[[], None]  # gives the lease to the next waiter (or frees it)
    timer: threading.Timer | None = field(default=None, repr=False)
    successor: Entry | None = None  # the waiter `hand_on` gives it to, for the next turn's release
    successor_seen_at: float = float("-inf")


class LineMemory:
    """What one owner remembers of the lines of the keys it takes: per key, how its line moves
    (`KnownLine`), and the leases its holders keep for their next turn, each handed on by a
    timer unless taken. A `@singleton` function owns one; `FairLease`s built without one share
    the process's (`LineMemory.of_process()`). The exit hook that hands kept leases on is
    registered when it first keeps one, not before."""

    _process: ClassVar[LineMemory | None] = None

    def __init__(self) -> None:
        self._known: dict[str, KnownLine] = {}
        self._kept: dict[str, Kept] = {}
        self._lock = threading.Lock()
        self._hooked = False  # whether this process's exit hands this memory's kept leases on

    @classmethod
    def of_process(cls) -> LineMemory:
        """The memory of `FairLease`s built without one (one per process, made at first use)."""
        if cls._process is None:
            cls._process = cls()
        return cls._process

    def known(self, lock_url: str) -> KnownLine:
        """What this memory knows of the line of the lock blob at `lock_url`."""
        with self._lock:
            return self._known.setdefault(lock_url, KnownLine())

    def keep_for_next_turn(self, lock_url: str, kept: Kept) -> None:
        """Keep `kept` for `KEEP_FOR` seconds; then its timer hands it on unless taken."""
        self._hand_on_at_exit()
        timer = threading.Timer(KEEP_FOR, self._expire, args=(lock_url, kept))
        timer.daemon = True
        kept.timer = timer
        with self._lock:
            previous = self._kept.pop(lock_url, None)
            self._kept[lock_url] = kept
        if previous is not None:  # cannot happen while one lease object per key is held at once
            _hand_on_kept(previous)
        timer.start()

    def take_kept(self, lock_url: str, now: float, period: float) -> Kept | None:
        """The lease kept for `lock_url`, if still young enough to reuse."""
        with self._lock:
            kept = self._kept.pop(lock_url, None)
        if kept is None:
            return None
        if kept.timer is not None:
            kept.timer.cancel()
        self.known(lock_url).asks_again = True
        if now - kept.confirmed_at > period / 3:
            _hand_on_kept(kept)  # unrenewed for too long to be trusted with a new turn
            return None
        return kept

    def _expire(self, lock_url: str, kept: Kept) -> None:
        with self._lock:
            if self._kept.get(lock_url) is not kept:
                return  # taken for another turn meanwhile
            del self._kept[lock_url]
            known = self._known.get(lock_url)
        if known is not None:
            known.asks_again = False  # keep no more until this process takes a turn in a row
        _hand_on_kept(kept)

    def hand_on_all(self) -> int:
        """Hand every kept lease on now (shutdown); returns how many there were."""
        with self._lock:
            kept = list(self._kept.values())
            self._kept.clear()
        for item in kept:
            if item.timer is not None:
                item.timer.cancel()
            _hand_on_kept(item)
        return len(kept)

    def _hand_on_at_exit(self) -> None:
        """At the first lease kept here: the process's exit hands kept leases on too (the exit
        hooks `_shutdown` registers at the first lease held run what `also_release` collects)."""
        with self._lock:
            if self._hooked:
                return
            self._hooked = True
        shutdown.also_release(self.hand_on_all)


def _hand_on_kept(kept: Kept) -> None:
    """Give a kept lease to the next waiter now (or free it); failures are logged."""
    try:
        kept.hand_on()
    except LeaseError as error:  # it expires by itself within a period
        log.warning("kept lease could not be handed on: %s", error)
    except Exception:
        log.exception("kept lease could not be handed on")
