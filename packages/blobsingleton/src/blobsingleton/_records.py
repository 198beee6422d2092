"""Run-once records: what is stored per key, the store contract behind it, and the speed layer
`@once` puts in front of any store (`fast`, `FastRecords`) (docs/internals.md)."""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from enum import StrEnum
from typing import Any

from blobsingleton._owner import instance_id
from blobsingleton.errors import RecordConflict


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

    `@once` puts the speed layer (`FastRecords`, below: remembered completions, look-first or
    create-first, ranked creates under contention) between its handler and any store; a store
    class that sets `speed_layer = False` gets exactly its own calls."""

    #: False: `@once` calls this store's operations as they are, with no speed layer between.
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


def _innermost(store: RecordStore) -> RecordStore:
    """The store a wrapper (the speed layer, a batch's look-up) passes its calls on to."""
    inner = getattr(store, "inner", None)
    while isinstance(inner, RecordStore):
        store, inner = inner, getattr(inner, "inner", None)
    return store


def reads_many(store: RecordStore) -> bool:
    return type(_innermost(store)).get_many is not RecordStore.get_many


def watches(store: RecordStore) -> bool:
    return type(_innermost(store)).watch is not RecordStore.watch


#: The `result` of a record read from a summary (a listing of a large record): the result is in
#: the record's body, read only when asked for (a batch's replay).
IN_BODY: Any = {"$t": "in_body"}


# The speed beside any `RecordStore`: what makes a claim cheap, kept out of the store's plain
# operations and out of the handler (docs/internals.md, "The speed layer").
#
# `fast(store)` wraps a store in `FastRecords`, unless the store's class sets
# `speed_layer = False`. It uses only the store's four operations and, where the store has them,
# `watch` and `get_many`:
#
# - remembered completions: a completed record seen in this process answers its key's duplicates
#   for REMEMBER_SECONDS without a request;
# - create first, or look first: where first looks mostly find the key completed, a claim looks
#   before it creates (first looks arriving together share one `get_many`);
# - ranked creates: where creates here often lose, a copy waits its rank (a hash of the instance
#   and the key) watching for the record instead of racing the first copy;
# - the lost-race look: a create that lost learns the winner's record through `watch`;
# - a batch's look-up (`get_many`) remembers the keys it saw absent, whose creates then look no
#   more.
#
# Its state is per process and store (`speed_key`, else the store object), so every handler on
# one store shares what it learnt.

#: Below this share of first looks finding the key completed, a claim creates without looking.
CREATE_FIRST_BELOW = 0.5
#: Above this share of creates lost, creates wait their rank (`create_delay`).
CONTENDED = 0.3
#: The ranks of copies spread over this many run durations.
SPREAD_RUNS = 4.0
#: Bounds of the run duration learnt here (seconds), and its first value.
MIN_RUN, FIRST_RUN, MAX_RUN = 0.01, 0.05, 0.5
#: How long a delivery that lost a create race watches for the winner's record.
LOST_RACE_WAIT = 2.0
#: First looks gather for GATHER_QUIET s of quiet (GATHER_MAX at most) into one `get_many`.
GATHER_QUIET, GATHER_MAX, GATHER_TIMEOUT = 0.004, 0.015, 10.0
#: How long a completed record seen here answers duplicates without a request, and how many.
REMEMBER_SECONDS, REMEMBER_MAX = 10.0, 20_000
#: Keys a batch's look-up saw absent, so their creates need not look again (the latest kept).
KEPT_ABSENT = 20_000


@dataclass
class _Gathered:
    """First looks gathered into one `get_many`."""

    keys: set[str] = field(default_factory=set)
    found: dict[str, Record | None] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)


class _Learnt:
    """What this process learnt of one store: rates, the run duration, records seen."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: How often a create here lost to another delivery's (recent, weighted).
        self.lost = 0.0
        #: How often a first look found the key completed (recent, weighted).
        self.completed = CREATE_FIRST_BELOW
        self.run_s = FIRST_RUN
        self.known: OrderedDict[str, tuple[Record, float]] = OrderedDict()
        self.absent: OrderedDict[str, None] = OrderedDict()
        self.gathering: _Gathered | None = None
        self.last_arrival = 0.0


_learnt: dict[Hashable, _Learnt] = {}
_learnt_by_store: weakref.WeakKeyDictionary[RecordStore, _Learnt] = weakref.WeakKeyDictionary()
_learnt_lock = threading.Lock()


def _learnt_for(store: RecordStore) -> _Learnt:
    ident = getattr(store, "speed_key", None)
    with _learnt_lock:
        if ident is not None:
            return _learnt.setdefault(ident, _Learnt())
        found = _learnt_by_store.get(store)
        if found is None:
            found = _learnt_by_store[store] = _Learnt()
        return found


def fast(store: RecordStore) -> RecordStore:
    """`store` behind the speed layer (itself if already, or if it opts out)."""
    if isinstance(store, FastRecords) or not getattr(store, "speed_layer", True):
        return store
    return FastRecords(store)


def run_seconds(store: RecordStore) -> float:
    """How long a run takes here, as the speed layer learnt it from completions on `store`."""
    learnt = _learnt_for(store)
    with learnt.lock:
        return learnt.run_s


def forget(store: RecordStore, key: str) -> None:
    """Forget a remembered completion of `key` (the store deleted it outside the layer)."""
    learnt = _learnt_for(store)
    with learnt.lock:
        learnt.known.pop(key, None)


def remember_seen(store: RecordStore, record: Record) -> None:
    """Remember a completed `record` the store saw on its own (a listing's neighbours), so its
    key's duplicates here are answered without a request."""
    _remember_in(_learnt_for(store), record.key, record)


def _remember_in(learnt: _Learnt, key: str, record: Record | None) -> None:
    """Keep a completed record (anything else, or None, forgets `key`)."""
    with learnt.lock:
        if record is None or record.status != Status.COMPLETED or record.read_at is None:
            learnt.known.pop(key, None)
            return
        learnt.known[key] = (record, time.monotonic())
        learnt.known.move_to_end(key)
        while len(learnt.known) > REMEMBER_MAX:
            learnt.known.popitem(last=False)


def forget_known() -> None:
    """Forget every completed record remembered in this process (as a new process would)."""
    with _learnt_lock:
        every = [*_learnt.values(), *_learnt_by_store.values()]
    for learnt in every:
        with learnt.lock:
            learnt.known.clear()


class FastRecords(RecordStore):
    """`inner` with the speed layer's shortcuts (module docstring); the same four operations."""

    speed_layer = True

    def __init__(self, inner: RecordStore) -> None:
        self.inner = inner
        self._learnt = _learnt_for(inner)

    def get(self, key: str) -> Record | None:
        known = self._known(key)
        if known is not None:
            return known
        record = self.inner.get(key)
        self._remember(key, record)
        return record

    def put_if_absent(self, record: Record) -> Record:
        key = record.key
        found = self._known(key)
        listed_absent = found is None and self._seen_absent(key)
        delay = self.create_delay(key) if found is None and not listed_absent else 0.0
        if found is None and delay <= 0 and not listed_absent and not self._create_first():
            found = self._look(key)  # keys here are mostly found done: look first
        if delay > 0:  # copies race here: the one ranked first creates, the others see it
            found = self._appears(key, delay)
        if found is not None:
            self._note(completed=found.status == Status.COMPLETED)
            raise RecordConflict("exists", existing=found)
        try:
            written = self.inner.put_if_absent(record)
        except RecordConflict as conflict:
            self._note(lost=True)
            latest = conflict.existing or self._appears(key, LOST_RACE_WAIT, look=False)
            if latest is None:
                raise
            self._note(completed=latest.status == Status.COMPLETED)
            raise RecordConflict(str(conflict), existing=latest) from None
        self._note(lost=False, completed=False)
        return written

    def replace(self, record: Record, etag: str) -> Record:
        written = self.inner.replace(record, etag)
        if record.status == Status.COMPLETED:
            seconds = max(MIN_RUN, min(MAX_RUN, time.time() - record.started_at))
            with self._learnt.lock:
                self._learnt.run_s = 0.7 * self._learnt.run_s + 0.3 * seconds
        self._remember(record.key, written)
        return written

    def delete(self, key: str, etag: str) -> None:
        self._remember(key, None)
        self.inner.delete(key, etag)

    def watch(self, key: str, etag: str | None, until: float) -> tuple[bool, Record | None]:
        changed, latest = self.inner.watch(key, etag, until)
        if changed:
            self._remember(key, latest)
        return changed, latest

    def get_many(self, keys: Sequence[str]) -> dict[str, Record | None]:
        found = self.inner.get_many(keys)
        for key, record in found.items():
            if record is None:
                self._note_absent(key)
            elif record.result is not IN_BODY:
                self._remember(key, record)
        return found

    def create_delay(self, key: str) -> float:
        """Where creates often lose, a delay before creating: this instance's rank for `key`
        (a hash of both, the same in all its processes) times SPREAD_RUNS runs; else 0."""
        with self._learnt.lock:
            if self._learnt.lost < CONTENDED:
                return 0.0
            spread = SPREAD_RUNS * self._learnt.run_s
        digest = hashlib.sha256(f"{instance_id()}/{key}".encode()).digest()
        return spread * int.from_bytes(digest[:2], "big") / 65536.0

    def _create_first(self) -> bool:
        with self._learnt.lock:
            return self._learnt.completed < CREATE_FIRST_BELOW

    def _note(self, *, lost: bool | None = None, completed: bool | None = None) -> None:
        with self._learnt.lock:
            if lost is not None:
                self._learnt.lost = 0.9 * self._learnt.lost + 0.1 * float(lost)
            if completed is not None:
                self._learnt.completed = 0.9 * self._learnt.completed + 0.1 * float(completed)

    def _appears(self, key: str, seconds: float, *, look: bool = True) -> Record | None:
        """The record of `key` once it exists, watched for up to `seconds` (None: still absent);
        a store that cannot watch is looked at once after them (`look`), or not at all."""
        if watches(self.inner):
            changed, latest = self.watch(key, None, time.monotonic() + seconds)
            return latest if changed else None
        if not look:
            return None  # the handler reads the record it lost to
        time.sleep(seconds)
        return self.get(key)

    def _look(self, key: str) -> Record | None:
        """The record of `key` now (None: absent): one `get_many` with the first looks arriving
        together, where the store has it, else a `get`."""
        if not reads_many(self.inner):
            return self.get(key)
        learnt = self._learnt
        with learnt.lock:
            gathered, leads = learnt.gathering, learnt.gathering is None
            if gathered is None:
                gathered = learnt.gathering = _Gathered()
            gathered.keys.add(key)
            learnt.last_arrival = started = time.monotonic()
        if leads:
            while True:
                with learnt.lock:
                    now = time.monotonic()
                    due = min(learnt.last_arrival + GATHER_QUIET, started + GATHER_MAX)
                    if due <= now:
                        learnt.gathering = None
                        break
                time.sleep(due - now)
            try:
                gathered.found = self.get_many(sorted(gathered.keys))
            except Exception:  # storage trouble: each reads its own key (whose error is raised)
                gathered.found = {}
            finally:
                gathered.done.set()
        else:
            gathered.done.wait(GATHER_TIMEOUT)
        record = gathered.found.get(key, IN_BODY)
        return self.get(key) if record is IN_BODY or key not in gathered.found else record

    def _known(self, key: str) -> Record | None:
        """A completed record of `key` seen here lately (a copy; its read time advanced)."""
        learnt = self._learnt
        with learnt.lock:
            entry = learnt.known.get(key)
            if entry is None:
                return None
            record, seen = entry
            age = time.monotonic() - seen
            if age > REMEMBER_SECONDS or record.read_at is None:
                del learnt.known[key]
                return None
        aged = record.with_(read_at=record.read_at + age)
        return None if aged.expired() else aged

    def _remember(self, key: str, record: Record | None) -> None:
        _remember_in(self._learnt, key, record)

    def _note_absent(self, key: str) -> None:
        with self._learnt.lock:
            self._learnt.absent[key] = None
            self._learnt.absent.move_to_end(key)
            while len(self._learnt.absent) > KEPT_ABSENT:
                self._learnt.absent.popitem(last=False)

    def _seen_absent(self, key: str) -> bool:
        """Whether a batch's look-up just saw `key` absent (once: later creates as usual)."""
        with self._learnt.lock:
            return self._learnt.absent.pop(key, 0) is None


def plain(store: RecordStore) -> RecordStore:
    """The store under the speed layer (`store` itself without one)."""
    return store.inner if isinstance(store, FastRecords) else store
