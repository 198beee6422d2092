"""A waiting line per key, so waiters get a contended lease in arrival order, and what one
process remembers of the lines it waits in (docs/internals.md)."""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

from blobsingleton import _shutdown as shutdown
from blobsingleton._listing import list_all
from blobsingleton._storage import (
    TIME_RESOLUTION,
    create_container_quietly,
    epoch,
    error_code,
    unavailable_as,
)
from blobsingleton.errors import LeaseError

log = logging.getLogger("blobsingleton")

#: Tickets are zero-padded so that the service lists entries in ticket order.
TICKET_DIGITS = 15
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


@dataclass(frozen=True)
class Entry:
    ticket: int
    lease_id: str
    refreshed_at: float  # epoch seconds, the service's clock


class WaitingLine:
    """The line of one key's lock blob: join, refresh, leave, and who is first."""

    def __init__(self, container: Any, lock_blob_name: str, key: str, period: float) -> None:
        self._container = container
        self._prefix = f"{lock_blob_name}.line/"
        self._tickets = container.get_blob_client(f"{lock_blob_name}.tickets")
        self.key = key
        self.period = period

    def join(self, lease_id: str) -> int:
        """Take the next ticket and stand in line with `lease_id`: 2 requests."""
        ticket = self._next_ticket()
        self.refresh(ticket, lease_id, "join line")
        return ticket

    def refresh(self, ticket: int, lease_id: str, operation: str = "refresh line entry") -> None:
        """Prove this waiter alive (rewrites the entry, so its Last-Modified moves)."""
        with unavailable_as(operation):
            self._entry(ticket).upload_blob(b"", overwrite=True, metadata={"lease_id": lease_id})

    def leave(self, ticket: int) -> None:
        with contextlib.suppress(ResourceNotFoundError), unavailable_as("leave line"):
            self._entry(ticket).delete_blob()

    def live(self) -> list[Entry]:
        """The live entries in ticket order (1 request per 5,000 entries)."""
        entries = []
        with unavailable_as("list line"):
            listed, served_at = list_all(self._container, self._prefix)
        for blob in listed:
            refreshed = epoch(blob.last_modified) or 0.0
            now = served_at if served_at is not None else refreshed
            if now - refreshed > self.period + TIME_RESOLUTION:
                continue  # its waiter stopped refreshing: gone
            ticket = int(blob.name[len(self._prefix) :])
            entries.append(Entry(ticket, blob.metadata.get("lease_id", ""), refreshed))
        return sorted(entries, key=lambda e: e.ticket)

    def _entry(self, ticket: int) -> Any:
        return self._container.get_blob_client(f"{self._prefix}{ticket:0{TICKET_DIGITS}d}")

    def _next_ticket(self) -> int:
        for _ in range(3):
            try:
                with unavailable_as("take ticket"):
                    result = self._tickets.set_sequence_number("increment")
                return int(result["blob_sequence_number"])
            except HttpResponseError as error:
                if error_code(error) not in ("BlobNotFound", "ContainerNotFound"):
                    raise
                if error_code(error) == "ContainerNotFound":
                    create_container_quietly(self._container)
                with contextlib.suppress(HttpResponseError):
                    self._tickets.create_page_blob(0, if_none_match="*")
        raise RuntimeError(f"ticket blob for {self.key!r} could not be created")


class LineWait:
    """One blocking acquire's place in a key's line, and when it next asks or looks."""

    def __init__(self, line: WaitingLine, memory: LineMemory, period: float, blocking: bool):
        self.line, self.memory, self.period, self.blocking = line, memory, period, blocking
        self.ticket: int | None = None  # our place in line, once joined
        self.lease_id = ""  # the lease id we stand in line with
        self._refreshed_at = self._looked_at = self._moved_at = 0.0  # monotonic
        self.joined_places = 0
        self._places = 1  # places before ours (the holder's included)
        self._turn_at = 0.0  # monotonic: when our place should come up
        self._holder_since = 0.0  # monotonic: about when the holder before us took over
        self._overdue_from = 0.0  # monotonic: the next in line backs off past this
        self._probe_next = True  # the next wake asks for the lease (else it lists the line)
        self._look_due = False

    def joins_at_once(self) -> bool:
        """This process just handed the key on: an attempt could only fail, so join."""
        return self.blocking and self.memory.busy(time.monotonic())

    def asks(self) -> bool:
        """Whether this wake asks for the lease; if it does not get it, the next looks."""
        self._look_due = True
        return self._probe_next

    def join(self) -> None:
        """Take a ticket and stand in line (2 requests), then plan the first look."""
        now = time.monotonic()
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
        now = time.monotonic()
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
        self._probe_next = time.monotonic() - self._moved_at > self.period

    def next_delay(self) -> float:
        """Seconds until the next wake (joining the line at the first)."""
        if self.ticket is None:
            self.join()
        elif time.monotonic() - self._refreshed_at > self.period / 3:
            self.line.refresh(self.ticket, self.lease_id)
            self._refreshed_at = time.monotonic()
        elif self._places > 1 and self._look_due:  # woke without the lease: where are we?
            self._look()
            self._plan()
        self._look_due = False
        now = time.monotonic()
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
class LineMemory:
    """This process's knowledge of one key's line (docs/internals.md)."""

    handed_at: float = float("-inf")  # monotonic
    handed_ticket: int | None = None
    per_place: float = FIRST_PER_PLACE  # from this process's own turns: when to ask
    asks_again: bool = True  # this process asks again within KEEP_FOR of a release
    released_at: float = float("-inf")  # monotonic: its last release (or handoff) of the key
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
    confirmed_at: float  # monotonic: when the service last confirmed it
    turns: int  # turns taken in a row by this process, including the one just released
    turns_since: float  # monotonic: when the first of them began
    hand_on: Callable[[], None]  # gives the lease to the next waiter (or frees it)
    timer: threading.Timer | None = field(default=None, repr=False)
    successor: Any = None  # the waiter `hand_on` gives it to, for the next turn's release
    successor_seen_at: float = float("-inf")


_memory: dict[str, LineMemory] = {}
_kept: dict[str, Kept] = {}
_lock = threading.Lock()


def memory(lock_url: str) -> LineMemory:
    with _lock:
        return _memory.setdefault(lock_url, LineMemory())


def keep(lock_url: str, kept: Kept) -> None:
    """Keep `kept` for `KEEP_FOR` seconds; then its timer hands it on unless taken."""
    timer = threading.Timer(KEEP_FOR, _expire, args=(lock_url, kept))
    timer.daemon = True
    kept.timer = timer
    with _lock:
        previous = _kept.pop(lock_url, None)
        _kept[lock_url] = kept
    if previous is not None:  # cannot happen while one lease object per key is held at once
        hand_on(previous)
    timer.start()


def take(lock_url: str, now: float, period: float) -> Kept | None:
    """The lease this process keeps for `lock_url`, if still young enough to reuse."""
    with _lock:
        kept = _kept.pop(lock_url, None)
    if kept is None:
        return None
    if kept.timer is not None:
        kept.timer.cancel()
    memory(lock_url).asks_again = True
    if now - kept.confirmed_at > period / 3:
        hand_on(kept)  # unrenewed for too long to be trusted with a new turn
        return None
    return kept


def _expire(lock_url: str, kept: Kept) -> None:
    with _lock:
        if _kept.get(lock_url) is not kept:
            return  # taken for another turn meanwhile
        del _kept[lock_url]
        memory = _memory.get(lock_url)
    if memory is not None:
        memory.asks_again = False  # keep no more until this process takes a turn in a row
    hand_on(kept)


def hand_on(kept: Kept) -> None:
    """Give a kept lease to the next waiter now (or free it); failures are logged."""
    try:
        kept.hand_on()
    except LeaseError as error:  # it expires by itself within a period
        log.warning("kept lease could not be handed on: %s", error)
    except Exception:
        log.exception("kept lease could not be handed on")


def hand_on_all() -> int:
    """Hand every kept lease on now (shutdown); returns how many there were."""
    with _lock:
        kept = list(_kept.values())
        _kept.clear()
    for item in kept:
        if item.timer is not None:
            item.timer.cancel()
        hand_on(item)
    return len(kept)


shutdown.also_release(hand_on_all)  # at exit too, a multiprocessing child's included
