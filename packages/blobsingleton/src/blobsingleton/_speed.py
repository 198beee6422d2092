"""The speed layer beside a run-once store: what makes duplicates and storms cheap, one object
per store owning all it learns, engaged only once it pays (docs/internals.md, "The speed
layer")."""

from __future__ import annotations

import hashlib
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

from blobsingleton._owner import instance_id
from blobsingleton._records import IN_BODY, Record, RecordStore, Status, reads_many, watches

#: Below this share of claims finding the key completed, a claim creates without looking.
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


@dataclass
class _Gathered:
    """First looks gathered into one `get_many`."""

    keys: set[str] = field(default_factory=set)
    found: dict[str, Record | None] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)


class SpeedLayer:
    """Beside one `RecordStore` (`speed_for`), shared by every claim on it in this process; the
    run-once handler asks it before a create and tells it what its writes found:

    - a completed record seen here (a completion, a duplicate's read, a listing) answers its
      key's duplicates for REMEMBER_SECONDS without a request;
    - where claims mostly find their key completed, a claim looks before it creates, the first
      looks arriving together sharing one `get_many`;
    - where creates often lose (a storm of copies), a copy waits its rank, watching the key,
      instead of racing the copy ranked first; a lost create learns the winner's record by
      watching.

    Plain until it pays: before it has seen a duplicate or a lost race (`engaged`), a claim is
    the store's create and nothing else. It calls only the store's operations (`watch` and
    `get_many` where the store has them); the store never calls it."""

    def __init__(self, store: RecordStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        #: A duplicate or a lost race was seen: the shortcuts below pay from now on.
        self.engaged = False
        #: How often a create here lost to another delivery's (recent, weighted).
        self.lost = 0.0
        #: How often a claim found its key completed (recent, weighted).
        self.completed = 0.0
        #: How long a run takes here (recent, weighted; SPREAD_RUNS of them spread the ranks).
        self.run_s = FIRST_RUN
        self._known: OrderedDict[str, tuple[Record, float]] = OrderedDict()
        self._gathering: _Gathered | None = None
        self._last_arrival = 0.0
        self._listening = False

    # What the handler asks.

    def before_create(self, key: str) -> Record | None:
        """The record a claim of `key` can start from instead of creating (None: create now):
        a completion remembered here, else, where it pays, the record a look found or that
        appeared while this copy waited its rank. No request before a duplicate or a lost race
        was seen here."""
        found = self.known(key) if self._known else None
        if found is None and self.engaged:
            delay = self.create_delay(key)
            if delay > 0:  # copies race here: the one ranked first creates, the others see it
                found = self._appears(key, delay)
            elif self.completed >= CREATE_FIRST_BELOW:  # keys here are mostly found done
                found = self._look(key)
        if found is not None:
            self._note(completed=found.status == Status.COMPLETED)
        return found

    def read(self, key: str) -> Record | None:
        """The record of `key`: a completion remembered here, else the store's `get`."""
        found = self.known(key)
        if found is None:
            found = self.store.get(key)
            self.remember(key, found)
        return found

    def lost_to(self, key: str, existing: Record | None) -> Record | None:
        """A create of `key` conflicted: the record there (the store's answer, else watched for
        up to LOST_RACE_WAIT s where the store watches, else read; None: gone since). A record
        completed there is a duplicate, not a lost race: only a record in progress (or none
        seen) counts toward `CONTENDED`."""
        self.engaged = True
        latest = existing or self._appears(key, LOST_RACE_WAIT, look=False) or self.read(key)
        done = latest is not None and latest.status == Status.COMPLETED
        self._note(lost=not done, completed=done)
        if latest is not None:
            self.remember(key, latest)
        return latest

    def created(self) -> None:
        """A create here won."""
        self._note(lost=False, completed=False)

    def completed_run(self, done: Record, written: Record) -> None:
        """A run here completed (`done`, as storage wrote it: `written`)."""
        seconds = max(MIN_RUN, min(MAX_RUN, time.time() - done.started_at))
        with self._lock:
            self.run_s = 0.7 * self.run_s + 0.3 * seconds
        self.remember(done.key, written)

    def looked_up(self, found: Mapping[str, Record | None]) -> None:
        """What a batch's look-up found (its records remembered, its absent keys forgotten)."""
        for key, record in found.items():
            if record is None or record.result is not IN_BODY:
                self.remember(key, record)

    def remember(self, key: str, record: Record | None) -> None:
        """Keep a completed record of `key`; anything else (None: gone) forgets it."""
        if not self._listening:
            self._listen()
        with self._lock:
            if record is None or record.status != Status.COMPLETED or record.read_at is None:
                self._known.pop(key, None)
                return
            self._known[key] = (record, time.monotonic())
            self._known.move_to_end(key)
            while len(self._known) > REMEMBER_MAX:
                self._known.popitem(last=False)

    def known(self, key: str) -> Record | None:
        """A completed record of `key` seen here lately (a copy; its read time advanced)."""
        with self._lock:
            entry = self._known.get(key)
            if entry is None:
                return None
            record, seen = entry
            age = time.monotonic() - seen
            if age > REMEMBER_SECONDS or record.read_at is None:
                del self._known[key]
                return None
        aged = record.with_(read_at=record.read_at + age)
        return None if aged.expired() else aged

    def forget(self) -> None:
        """Forget every completion remembered (as a new process would)."""
        with self._lock:
            self._known.clear()

    def create_delay(self, key: str) -> float:
        """Where creates often lose, a delay before creating: this instance's rank for `key`
        (a hash of both, the same in all its processes) times SPREAD_RUNS runs; else 0."""
        with self._lock:
            if self.lost < CONTENDED:
                return 0.0
            spread = SPREAD_RUNS * self.run_s
        digest = hashlib.sha256(f"{instance_id()}/{key}".encode()).digest()
        return spread * int.from_bytes(digest[:2], "big") / 65536.0

    # How.

    def _listen(self) -> None:
        """Hear of completed records the store sees on its own (a listing's neighbours) and of
        deletes made outside this layer (`ops reset`), where the store tells (`notify`)."""
        self._listening = True
        notify = getattr(self.store, "notify", None)
        if callable(notify):
            notify(self._heard)

    def _heard(self, key: str, record: Record | None) -> None:
        if record is None:
            with self._lock:
                self._known.pop(key, None)
        else:
            self.remember(key, record)

    def _note(self, *, lost: bool | None = None, completed: bool | None = None) -> None:
        with self._lock:
            if lost is not None:
                self.lost = 0.9 * self.lost + 0.1 * float(lost)
            if completed is not None:
                self.completed = 0.9 * self.completed + 0.1 * float(completed)
                self.engaged = self.engaged or completed

    def _appears(self, key: str, seconds: float, *, look: bool = True) -> Record | None:
        """The record of `key` once it exists, watched for up to `seconds` (None: still absent);
        a store that cannot watch is looked at once after them (`look`), or not at all."""
        if watches(self.store):
            changed, latest = self.store.watch(key, None, time.monotonic() + seconds)
            if changed:
                self.remember(key, latest)
            return latest if changed else None
        if not look:
            return None  # the handler reads the record it lost to
        time.sleep(seconds)
        return self.read(key)

    def _look(self, key: str) -> Record | None:
        """The record of `key` now (None: absent): one `get_many` with the first looks arriving
        together, where the store has it, else a `get`."""
        if not reads_many(self.store):
            return self.read(key)
        with self._lock:
            gathered, leads = self._gathering, self._gathering is None
            if gathered is None:
                gathered = self._gathering = _Gathered()
            gathered.keys.add(key)
            self._last_arrival = started = time.monotonic()
        if leads:
            while True:
                with self._lock:
                    now = time.monotonic()
                    due = min(self._last_arrival + GATHER_QUIET, started + GATHER_MAX)
                    if due <= now:
                        self._gathering = None
                        break
                time.sleep(due - now)
            try:
                gathered.found = self.store.get_many(sorted(gathered.keys))
                for each, record in gathered.found.items():
                    if record is not None and record.result is not IN_BODY:
                        self.remember(each, record)
            except Exception:  # storage trouble: each reads its own key (whose error is raised)
                gathered.found = {}
            finally:
                gathered.done.set()
        else:
            gathered.done.wait(GATHER_TIMEOUT)
        record = gathered.found.get(key, IN_BODY)
        return self.read(key) if record is IN_BODY or key not in gathered.found else record


_layers: dict[Hashable, SpeedLayer] = {}
_layers_by_store: weakref.WeakKeyDictionary[RecordStore, SpeedLayer] = weakref.WeakKeyDictionary()
_layers_lock = threading.Lock()


def speed_for(store: RecordStore) -> SpeedLayer | None:
    """The speed layer beside `store` in this process (one per `speed_key` where the store has
    one, else per store object); None for a store whose class sets `speed_layer = False`."""
    if not store.speed_layer:
        return None
    ident = getattr(store, "speed_key", None)
    with _layers_lock:
        if ident is not None:
            found = _layers.get(ident)
            if found is None:
                found = _layers[ident] = SpeedLayer(store)
            return found
        found = _layers_by_store.get(store)
        if found is None:
            found = _layers_by_store[store] = SpeedLayer(store)
        return found


def forget_known() -> None:
    """Forget what every speed layer here remembers of records (as a new process would)."""
    with _layers_lock:
        every = [*_layers.values(), *_layers_by_store.values()]
    for layer in every:
        layer.forget()
