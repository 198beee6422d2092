"""A waiting line per key, so that waiters get a contended lease in arrival order.

Blob leases are not fair: a holder that releases and asks again at once wins almost every
time, because waiters only poll. The line fixes that with what Blob Storage does atomically:

- A waiter takes a ticket (the sequence number of a `{lock}.tickets` page blob, incremented
  by the service: one request, strictly increasing) and writes an entry blob
  `{lock}.line/{ticket}` carrying the lease id it will use.
- A fair holder does not release into the void: it lists the line (one request) and
  *changes* its lease to the lease id of the first live entry (Change Lease). The lease is
  never free while someone waits, so nobody can barge in; the waiter finds it holds the key
  when it next asks (an Acquire Lease with its own id succeeds on a lease that already has
  that id).
- Waiters do not poll the line. Each knows its place (counted from the ticket its own process
  last handed to, else one listing) and plans when to look again from the pace the line was
  seen moving; the next in line asks for the lease shortly before the holder's turn should
  end (as long as this process's own turns take), then every 50 ms, backing off while a long
  hold runs on; a line standing still makes everyone look less often. What a process learns
  is kept in `_keep` (never written to storage).
- Entries prove their waiter alive by being rewritten every third of a lease period; one not
  rewritten for a period is skipped, so a dead waiter blocks the line for at most one lease
  period (the lease handed to it expires unrenewed; waiters behind a line that stood still
  for a period ask for the lease too). Both times are storage's: an entry's Last-Modified
  against the listing's `Date`.

Mutual exclusion is still the lease alone; the line only decides who tries.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

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
