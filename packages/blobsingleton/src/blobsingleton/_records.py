"""Run-once records: what is stored per key, and the store contract behind it
(docs/internals.md)."""

from __future__ import annotations

import functools
import hashlib
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"


#: Fields a store keeps beside the record's JSON (metadata, response headers), not inside it.
_NOT_IN_BODY = ("etag", "written_at", "read_at")


@dataclass(frozen=True)
class Record:
    """One key's state. Times are UTC epoch seconds. `result` is the stored (encoded) form of
    what the run returned (see `blobsingleton.results`)."""

    key: str
    status: Status
    expires_at: float
    started_at: float
    payload_hash: str | None = None
    result: Any = None
    owner: str = ""
    attempt: int = 1
    #: The writing delivery's random claim id: a writer whose answer was lost knows its record.
    claim: str = ""
    #: The `@singleton` lease the writer ran under (its key and fencing token; "" and None:
    #: none): a holder of a later token of that lease takes the record over at once.
    lease: str = ""
    token: int | None = None
    etag: str | None = None
    #: Seconds it lives after its last write, in storage's time (None: `expires_at` decides).
    ttl: float | None = None
    #: Storage's time of the last write (the latest it can have been), as the store reports it.
    written_at: float | None = None
    #: Storage's time when the store read this record.
    read_at: float | None = None

    def remaining(self, now: float | None = None) -> float:
        """Seconds left before the record expires, in storage's time where the store says it
        (`now`, default the clock, only for a store that reports no storage time)."""
        if self.ttl is not None and self.ttl <= 0:
            return 0.0  # written to be abandoned on sight (work guarded by a lease)
        if self.ttl is not None and self.written_at is not None and self.read_at is not None:
            return self.written_at + self.ttl - self.read_at
        reference = self.read_at if self.read_at is not None else now
        return self.expires_at - (time.time() if reference is None else reference)

    def expired(self, now: float | None = None) -> bool:
        return self.remaining(now) <= 0

    def with_(self, **changes: Any) -> Record:
        """This record with `changes` (`dataclasses.replace`'s answer at a fifth of its cost: a
        record is copied several times per invocation)."""
        unknown = changes.keys() - _FIELD_NAMES
        if unknown:
            raise TypeError(f"Record has no field {sorted(unknown)[0]!r}")
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__, **changes)
        return copy

    def to_json(self) -> bytes:
        """The record's JSON body: fields at their defaults left out (a reader, this version's
        or an earlier one, takes the default for a missing field), so the body and the copy in
        the blob's metadata that every listing carries stay small."""
        data = {}
        for name, default in _body_defaults():
            value = getattr(self, name)
            if type(value) is not type(default) or value != default:
                data[name] = value
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes, etag: str | None, **beside: Any) -> Record:
        """The record in `raw` (unknown fields ignored), with fields kept outside the body."""
        data = json.loads(raw)
        known = _body_fields()
        values = {k: v for k, v in data.items() if k in known}
        values["status"] = Status(values["status"])
        return cls(**{**values, **beside}, etag=etag)


_FIELD_NAMES = frozenset(f.name for f in fields(Record))


@functools.cache
def _body_fields() -> tuple[str, ...]:
    """The record's fields its JSON body holds, in declaration order."""
    return tuple(f.name for f in fields(Record) if f.name not in _NOT_IN_BODY)


@functools.cache
def _body_defaults() -> tuple[tuple[str, Any], ...]:
    """Each body field and its default (a unique marker for a field without one: always kept)."""
    missing = object()
    known = {f.name: f.default for f in fields(Record)}
    return tuple(
        (name, missing if known[name] is MISSING else known[name]) for name in _body_fields()
    )


def payload_hash(payload: Any) -> str:
    """A SHA-256 of `payload` (JSON; bytes and str as they are), per field for a mapping."""
    if isinstance(payload, Mapping):
        hashes = {str(name): _digest(value)[:32] for name, value in payload.items()}
        return json.dumps(hashes, sort_keys=True, separators=(",", ":"))
    return _digest(payload)


def _digest(value: Any) -> str:
    if isinstance(value, bytes):
        raw = value
    elif isinstance(value, str):
        raw = value.encode()
    else:
        raw = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(raw).hexdigest()


def differing_fields(stored: str, current: str) -> tuple[str, ...]:
    """The fields whose hashes differ between two payload hashes (() if either is whole)."""
    if not (stored.startswith("{") and current.startswith("{")):
        return ()
    old, new = json.loads(stored), json.loads(current)
    return tuple(sorted(name for name in set(old) | set(new) if old.get(name) != new.get(name)))


class RecordStore(ABC):
    """Persistence of run-once records: four operations, each one storage request. A returned
    record carries its etag and, where the store can tell, `written_at` and `read_at` in
    storage's time (for a write: when storage answered). A conflict is `RecordConflict`, with
    the record now there as `existing` if the store knows it.

    Beside any store, `@once` keeps its speed layer (`_speed.SpeedLayer`: remembered
    completions, looks first where keys are mostly found done, ranked creates under
    contention); it engages only once duplicates or lost races are seen. A store class that
    sets `speed_layer = False` gets exactly its own calls."""

    #: False: `@once` calls this store's operations as they are, with no speed layer beside.
    speed_layer: bool = True

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

    def watch(self, key: str, etag: str | None, until: float) -> tuple[bool, Record | None]:
        """Optional: wait until the record of `key` no longer has `etag` (None: exists), until
        monotonic `until` at the latest; returns (changed, record now or latest known). Without
        it, a busy policy's `hold` does not hold: a busy delivery gets its policy at once."""
        raise NotImplementedError

    def get_many(self, keys: Sequence[str]) -> dict[str, Record | None]:
        """Optional: the records of many `keys` in few requests (a batch's look-up, see
        `fn.each`). The answer holds a key's record, or None for a key seen absent; a key it
        leaves out was not looked at (the caller reads it alone). Without it, each key of a
        batch costs its own look-up."""
        raise NotImplementedError


def reads_many(store: RecordStore) -> bool:
    """Whether `store` has `get_many` (else each key costs its own look-up)."""
    return type(store).get_many is not RecordStore.get_many


def watches(store: RecordStore) -> bool:
    """Whether `store` has `watch` (else a busy delivery is not held)."""
    return type(store).watch is not RecordStore.watch


#: The `result` of a record read from a summary (a listing of a large record): the result is in
#: the record's body, read only when asked for (a batch's replay).
IN_BODY: Any = {"$t": "in_body"}
