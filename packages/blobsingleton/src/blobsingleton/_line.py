"""A waiting line per key: waiters get a contended lease in arrival order (docs/internals.md)."""

from __future__ import annotations

import contextlib
import random
import time
import uuid
from dataclasses import dataclass
from typing import Any

from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

from blobsingleton._keep import LineMemory
from blobsingleton._listing import list_all
from blobsingleton._storage import (
    TIME_RESOLUTION,
    create_container_quietly,
    epoch,
    error_code,
    unavailable_as,
)

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
        with unavailable_as("join line"):
            self._entry(ticket).upload_blob(b"", overwrite=True, metadata={"lease_id": lease_id})
        return ticket

    def refresh(self, ticket: int, lease_id: str) -> None:
        """Prove this waiter alive (rewrites the entry, so its Last-Modified moves)."""
        with unavailable_as("refresh line entry"):
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
