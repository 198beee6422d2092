"""Run-once records: what is stored per key, and the small store interface behind it.

A record lives `ttl` seconds after its last write, judged in the storage service's time: a
store reports when storage wrote the record (`written_at`, the latest instant it can have
been) and when storage served the read (`read_at`), so no instance's clock decides whether
a record has expired. `expires_at` (the writer's own clock plus `ttl`) is still written, for
people reading a record and for library versions before 0.3 during a rolling upgrade; it
decides only for records those versions wrote, which carry no `ttl`.

A store implements four operations; the rest of `RecordStore` is optional (waiting for a key
in progress, reading many keys at once, remembering completed ones), with defaults that
behave as a plain store: a busy delivery then gets its busy policy at once.
"""

from __future__ import annotations

import functools
import json
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"


#: Fields a store keeps beside the record's JSON (metadata, response headers), not inside it.
_NOT_IN_BODY = ("etag", "ttl", "written_at", "read_at")


@dataclass(frozen=True)
class Record:
    """One key's state. Times are UTC epoch seconds."""

    key: str
    status: Status
    expires_at: float
    started_at: float
    payload_hash: str | None = None
    result: Any = None
    owner: str = ""
    attempt: int = 1
    etag: str | None = None
    #: Seconds the record lives after its last write, in storage's time (None: written by 0.2).
    ttl: float | None = None
    #: Storage's time of the last write (the latest it can have been), as the store reports it.
    written_at: float | None = None
    #: Storage's time when the store read this record.
    read_at: float | None = None

    def remaining(self, now: float | None = None) -> float:
        """Seconds left before the record expires, in storage's time where the store says it.

        `now` is only consulted for a record whose store reports no storage time at all.
        """
        if self.ttl is not None and self.ttl <= 0:
            return 0.0  # written to be abandoned on sight (work guarded by a lease)
        if self.ttl is not None and self.written_at is not None and self.read_at is not None:
            return self.written_at + self.ttl - self.read_at
        reference = self.read_at if self.read_at is not None else now
        return self.expires_at - (time.time() if reference is None else reference)

    def expired(self, now: float | None = None) -> bool:
        return self.remaining(now) <= 0

    def with_(self, **changes: Any) -> Record:
        return replace(self, **changes)

    def to_json(self) -> bytes:
        data = {name: getattr(self, name) for name in _body_fields()}
        return json.dumps(data, separators=(",", ":"), default=str).encode()

    @classmethod
    def from_json(cls, raw: bytes, etag: str | None, **beside: Any) -> Record:
        """The record in `raw`; `beside` are the fields its store keeps outside the body.

        Fields this version does not know (written by a later one) are ignored.
        """
        data = json.loads(raw)
        known = _body_fields()
        values = {k: v for k, v in data.items() if k in known}
        values["status"] = Status(values["status"])
        return cls(**values, etag=etag, **beside)


@functools.cache
def _body_fields() -> tuple[str, ...]:
    """The record's fields its JSON body holds, in declaration order."""
    return tuple(f.name for f in fields(Record) if f.name not in _NOT_IN_BODY)


class RecordStore(ABC):
    """Persistence of run-once records: four operations, each one storage request.

    Every record a store returns carries its etag and, where the store can tell, `written_at`
    and `read_at` in storage's time (a record just written: `read_at` is when storage answered).
    """

    @abstractmethod
    def get(self, key: str) -> Record | None:
        """The record of `key` with its etag, or None."""

    @abstractmethod
    def put_if_absent(self, record: Record) -> Record:
        """Create the record; `RecordConflict` if one exists. Returns it with its etag."""

    @abstractmethod
    def replace(self, record: Record, etag: str) -> Record:
        """Overwrite the record if it still has `etag`; `RecordConflict` otherwise."""

    @abstractmethod
    def delete(self, key: str, etag: str) -> None:
        """Delete the record if it still has `etag`; `RecordConflict` otherwise."""

    # -- optional: waiting for many keys at once (a store without it re-queues busy copies) ----
    #: Whether `watch` waits for a change (else a busy delivery gets its busy policy at once).
    can_watch: bool = False

    def watch(self, key: str, etag: str | None, until: float) -> tuple[bool, Record | None]:
        """Wait until the record of `key` no longer has `etag` (None: until it exists), at the
        latest until the monotonic time `until`. Returns (changed, record): when changed, the
        record now (None: deleted); when not, the latest known record or None if none was
        learnt. The default learns nothing: (False, None) at once."""
        return False, None

    def known(self, key: str) -> Record | None:
        """A completed, unexpired record of `key` this process saw lately, without a request
        (None: ask storage)."""
        return None

    def note_run(self, seconds: float) -> None:  # noqa: B027 (optional; nothing by default)
        """A run in this process took `seconds` (how a watching store paces its checks)."""

    def note_first_look(self, completed: bool) -> None:  # noqa: B027 (optional)
        """A delivery's first look at its key found it completed (or not): how a store
        chooses `create_first`."""

    def note_create(self, lost: bool) -> None:  # noqa: B027 (optional)
        """A create of a new record here won, or lost to another delivery's."""

    def create_delay(self, key: str) -> float:
        """Seconds a delivery that found `key` absent waits (watching) before creating it,
        so that where creates race, one copy creates and the others see it. Default 0."""
        return 0.0

    def create_first(self) -> bool:
        """Whether a delivery should try to create its record before reading it (keys here
        are mostly new, so the create's answer says all). Default: read first."""
        return False

    def read(self, key: str) -> Record | None:
        """`get` as a delivery's first look at its key: a store may answer many keys read at
        the same moment with one request. Default: `get`."""
        return self.get(key)
