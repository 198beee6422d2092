"""What needs a person, kept where operators can see it, not only in the logs.

Two kinds of note, each one small JSON blob in OPS_NOTES_CONTAINER ("ops-notes"), named
newest first (`{kind}/{inverted time}-{id}.json`, so a listing's first page is the newest):

    poison/{...}   a message moved to a poison queue: queue, message id, reason (never the body)
    lost/{...}     a lease its holder lost: key, instance, function, token, reason

A poison note is written by `shared.poison.reject` beside its log line; a lost lease by
`LostLeaseNotes`, a handler on the library's `blobsingleton.events` logger (its `lost`
event). Writing a note never fails the work that logs it: a failed write is logged.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any

from azure.core.exceptions import ResourceNotFoundError

from shared import ops_tally, storage
from shared.ops_notes import ensure, iso, notes_container

log = logging.getLogger(__name__)

#: Newest notes read per kind (one listing and one read each).
NEWEST = 10
_INVERT = 10**13


def note(kind: str, fields: dict[str, Any]) -> None:
    """Keep one note of `kind` (best effort: a failure is logged, never raised)."""
    now = time.time()
    name = f"{kind}/{_INVERT - int(now * 1000):013d}-{uuid.uuid4().hex[:8]}.json"
    body = json.dumps({"at": iso(now), **fields}, default=str).encode()
    try:
        container = notes_container()
        ensure(container)
        container.upload_blob(name, body)
    except Exception:  # the work that logs it goes on: the log line has it too
        log.warning("could not keep an operators' note of kind %s", kind, exc_info=True)


def newest(kind: str, limit: int = NEWEST) -> list[dict[str, Any]]:
    """The newest `limit` notes of `kind`, newest first."""
    container = notes_container()
    pages = container.list_blobs(name_starts_with=f"{kind}/", results_per_page=limit).by_page()
    try:
        names = [b.name for b in next(pages, [])][:limit]
    except ResourceNotFoundError:
        return []
    found = []
    for name in names:
        try:
            found.append(json.loads(container.download_blob(name).readall()))
        except ResourceNotFoundError:
            continue
    return found


def note_poisoned(queue: str, message_id: str, reason: str) -> None:
    note("poison", {"queue": queue, "message_id": message_id, "reason": reason[:1000]})
    ops_tally.install().count("poison")


class LostLeaseNotes(logging.Handler):
    """Keeps a note of each `lost` event of the library's events logger."""

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "event", None) != "lost":
            return
        names = ("key", "instance", "function", "invocation_id", "token", "reason")
        fields = {name: getattr(record, name, None) for name in names}
        note("lost", fields)


def install_lost_lease_notes() -> None:
    """Add the handler once (idempotent) to `blobsingleton.events`."""
    events = logging.getLogger("blobsingleton.events")
    if not any(isinstance(h, LostLeaseNotes) for h in events.handlers):
        events.addHandler(LostLeaseNotes(logging.WARNING))


def poison_queues(queues: list[str]) -> list[dict[str, Any]]:
    """Each poison queue's message count (approximate, as storage gives it) and the newest
    reasons noted for it."""
    notes = newest("poison", 50)
    views = []
    for queue in queues:
        try:
            count = storage.queue_client(queue).get_queue_properties().approximate_message_count
        except ResourceNotFoundError:
            count = 0
        reasons = [n for n in notes if n.get("queue") == queue][:5]
        views.append({"queue": queue, "count": int(count or 0), "newest": reasons})
    return views
