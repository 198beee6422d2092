"""The run-once fingerprint of a notification: one hash per field the recipient reads.

An event id is sent once; a message that reuses it must carry the same notification, or it is
poisoned (never silently skipped). The fingerprint is what "the same" means, stored as the
payload of the event's run-once record (`email-{event_id}`):

    v2:event_id=<h>;type=<h>;to=<h>;subject=<h>;text=<h>;html=<h>;template_id=<h>;template_data=<h>

`<h>` is the first 32 hex digits of SHA-256 over the field's canonical JSON (`null` when
unset; recipients lower-cased and sorted: order and case do not change who reads it). Two
notifications are the same when every hash matches, and the fields whose hashes differ are
named in the poison reason: names only, never values (addresses and text are personal data).

`@once(payload=...)` stores a SHA-256 of whatever the payload callable returns, which cannot be
compared field by field, so `FingerprintStore` (the app's `RecordStore` around the library's
`BlobRecordStore`) writes the composite itself into the record's `payload_hash` and answers the
library's payload check from it: a matching record is handed over without a payload (the
library checks none), a differing one with its stored value (never equal to the library's
hash), and the differing fields are noted on the `Delivery` in scope. The delivery in scope is
set by `delivering(notification)` around each call, in a context variable: the heartbeat
thread the library starts runs in a copy of that context.

Records written before this format are honoured while they live (7 days' retention): they hold
the library's hash of an older fingerprint, one SHA-256 hex string of either the identity
(event id, type, recipients, template; 23 Nov 2026) or the whole message (until then). A
message whose older fingerprint equals the stored one is a duplicate, as it was when the
record was written; any other is poisoned, with the fields reported as unknown.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from blobsingleton.records import BlobRecordStore, Record, RecordStore

from shared import storage
from shared.notifications.message import Notification

VERSION = "v2"
#: The fields hashed, in the order they are written.
FIELDS = ("event_id", "type", "to", "subject", "text", "html", "template_id", "template_data")
HASH_DIGITS = 32
#: What `differing_fields` reports for a record without per-field hashes (an older format).
UNKNOWN = ("unknown: the earlier record predates per-field fingerprints",)


class ContentMismatch(ValueError):
    """An event id already used for a notification with other content; names the fields."""

    def __init__(self, event_id: str, fields: tuple[str, ...]) -> None:
        super().__init__(
            "this event id was used before for a notification with different content "
            f"(fields that differ: {', '.join(fields)}); not sent"
        )
        self.event_id = event_id
        self.fields = fields


def _canonical(value: Any) -> bytes:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return text.encode("ascii")


def _values(notification: Notification) -> dict[str, Any]:
    values: dict[str, Any] = {name: getattr(notification, name) for name in FIELDS}
    values["to"] = sorted(address.lower() for address in notification.to)
    return values


def fingerprint(notification: Notification) -> str:
    """The composite `v2:field=hash;...` of `notification` (see the module doc)."""
    parts = (
        f"{name}={hashlib.sha256(_canonical(value)).hexdigest()[:HASH_DIGITS]}"
        for name, value in _values(notification).items()
    )
    return f"{VERSION}:" + ";".join(parts)


def parse_fingerprint(value: str | None) -> dict[str, str] | None:
    """Field -> hash of a composite fingerprint; None for anything else (an older format)."""
    if not value or not value.startswith(f"{VERSION}:"):
        return None
    hashes: dict[str, str] = {}
    for part in value[len(VERSION) + 1 :].split(";"):
        name, sep, digest = part.partition("=")
        if not sep or not name:
            return None
        hashes[name] = digest
    return hashes


def differing_fields(stored: str | None, current: str) -> tuple[str, ...]:
    """Names of the fields whose hashes differ between two fingerprints (`UNKNOWN` if the
    stored one has no per-field hashes)."""
    old, new = parse_fingerprint(stored), parse_fingerprint(current)
    if old is None or new is None:
        return UNKNOWN
    names = list(FIELDS) + sorted((set(old) | set(new)) - set(FIELDS))
    return tuple(name for name in names if old.get(name) != new.get(name))


def legacy_payload_hashes(notification: Notification) -> frozenset[str]:
    """The `payload_hash` values the earlier fingerprints left in records of `notification`.

    Those records were written with `@once(payload=lambda n, msg: n.fingerprint())`, and the
    library stores SHA-256 (hex) of the UTF-8 string the payload callable returns.
    """
    identity = {
        "event_id": notification.event_id,
        "type": notification.type,
        "to": sorted(address.lower() for address in notification.to),
        "template_id": notification.template_id,
    }
    older = (identity, notification.to_dict())
    fingerprints = (hashlib.sha256(_canonical(value)).hexdigest() for value in older)
    return frozenset(hashlib.sha256(fp.encode("utf-8")).hexdigest() for fp in fingerprints)


# -- the record store that keeps the composite ------------------------------------------------


@dataclass
class Delivery:
    """The notification being delivered in this context, and what its payload check found."""

    event_id: str
    fingerprint: str
    legacy: frozenset[str]
    #: Set when the stored record differs: the names of the fields that differ.
    differing: tuple[str, ...] | None = field(default=None)

    def matches(self, stored: str | None) -> bool:
        return stored is None or stored == self.fingerprint or stored in self.legacy


_current: contextvars.ContextVar[Delivery | None] = contextvars.ContextVar(
    "notification_delivery", default=None
)


@contextlib.contextmanager
def delivering(notification: Notification) -> Iterator[Delivery]:
    """Make `notification` the one `FingerprintStore` checks and writes in this context."""
    delivery = Delivery(
        notification.event_id, fingerprint(notification), legacy_payload_hashes(notification)
    )
    token = _current.set(delivery)
    try:
        yield delivery
    finally:
        _current.reset(token)


def payload(notification: Notification, *_: Any) -> str:
    """The `@once` payload callable: the composite (the library hashes it; the store keeps it)."""
    return fingerprint(notification)


class FingerprintStore(RecordStore):
    """`BlobRecordStore` (built per call from the app settings, on the app's storage account)
    that stores the composite
    fingerprint of the delivery in scope as the record's payload and checks it field by field.
    """

    def _inner(self) -> RecordStore:
        # The app's account: its clients retry within the app's budget (`shared.storage`),
        # so a completion answered 503 lands while its record still lives.
        return BlobRecordStore(storage=storage.account())

    def get(self, key: str) -> Record | None:
        return self._checked(self._inner().get(key))

    can_watch = True

    def watch(self, key: str, etag: str | None, until: float) -> tuple[bool, Record | None]:
        changed, record = self._inner().watch(key, etag, until)
        return changed, self._checked(record)

    def known(self, key: str) -> Record | None:
        return self._checked(self._inner().known(key))

    def note_run(self, seconds: float) -> None:
        self._inner().note_run(seconds)

    def read(self, key: str) -> Record | None:
        return self._checked(self._inner().read(key))

    def create_first(self) -> bool:
        return self._inner().create_first()

    def note_first_look(self, completed: bool) -> None:
        self._inner().note_first_look(completed)

    def note_create(self, lost: bool) -> None:
        self._inner().note_create(lost)

    def create_delay(self, key: str) -> float:
        return self._inner().create_delay(key)

    def _checked(self, record: Record | None) -> Record | None:
        """A stored record as the library should see it, for the delivery in scope."""
        delivery = _current.get()
        if record is None or delivery is None:
            return record
        if delivery.matches(record.payload_hash):
            # The same notification: hand it over without a payload, which the library does
            # not check (its own hash of the composite is not what is stored).
            return record.with_(payload_hash=None)
        delivery.differing = differing_fields(record.payload_hash, delivery.fingerprint)
        return record  # stored value != the library's hash: PayloadMismatch

    def _stored(self, record: Record) -> Record:
        delivery = _current.get()
        stored = record.payload_hash
        if delivery is None or stored is None or parse_fingerprint(stored) is not None:
            return record
        # A new record of the delivery in scope: the library's hash becomes the composite.
        return record.with_(payload_hash=delivery.fingerprint)

    def put_if_absent(self, record: Record) -> Record:
        return self._inner().put_if_absent(self._stored(record))

    def replace(self, record: Record, etag: str) -> Record:
        return self._inner().replace(self._stored(record), etag)

    def delete(self, key: str, etag: str) -> None:
        self._inner().delete(key, etag)


__all__ = [
    "FIELDS",
    "ContentMismatch",
    "Delivery",
    "FingerprintStore",
    "delivering",
    "differing_fields",
    "fingerprint",
    "legacy_payload_hashes",
    "parse_fingerprint",
    "payload",
]
