"""The watcher of run-once record blobs: many keys' records per request, one thread per
process and records prefix (`RecordWatch`), for the store's `watch` and `get_many`
(docs/internals.md)."""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from azure.core.exceptions import HttpResponseError

from blobsingleton import _telemetry as telemetry
from blobsingleton._invocation import thread_target
from blobsingleton._listing import list_page
from blobsingleton._records import Record, Status
from blobsingleton._storage_errors import Meaning, meaning, refused

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient

log = logging.getLogger("blobsingleton")

#: How long a look (`read_many`) waits for its tick at most.
READ_TIMEOUT = 10.0
#: Bounds of the pace between ticks (seconds).
MIN_TICK, FIRST_TICK, MAX_TICK = 0.01, 0.05, 0.5
#: Each unchanged tick waits this much longer than the last (up to MAX_TICK).
BACKOFF = 1.5
#: Watch ticks one waiting delivery pays for, and how many a process may save up.
TICKS_PER_WAIT, MAX_TOKENS = 0.5, 4.0
#: A tick lists LIST_SLACK names per waiting name (PAGE_SIZE at most, one page); names
#: past those are read one by one (large listings cost more than one request: internals.md).
LIST_SLACK, PAGE_SIZE = 8, 32
#: Fewer names than this waiting are read one by one.
MIN_LIST = 2


@dataclass
class _Waiter:
    name: str
    key: str
    #: The etag seen (None: the record was seen absent).
    etag: str | None
    until: float
    #: When it next wants a tick (monotonic).
    due: float = 0.0
    #: The pace of its ticks while nothing changes.
    interval: float = FIRST_TICK
    #: A look (`read_many`): any state answers it, at the next tick, which it needs no token for.
    fresh: bool = False
    released: threading.Event = field(default_factory=threading.Event)
    #: What the record is when released (None: absent).
    record: Record | None = None
    changed: bool = False


@dataclass
class State:
    """What a tick learned of one blob name: absent, or its etag (and record, if listed)."""

    present: bool
    etag: str | None = None
    record: Record | None = None


class Watched(Protocol):
    """What the watcher asks of the store whose records it watches (`BlobRecordStore`)."""

    def read(self, key: str) -> Record | None:
        """A plain read of one record (for a listing that carries none)."""

    def read_unless(self, name: str, etag: str | None) -> State:
        """A read of blob `name`, unless it still has `etag` (then present, unchanged)."""

    def listed(self, item: Any, served_at: float | None) -> tuple[str | None, Record | None]:
        """A listed blob's etag (quoted) and the record its metadata carries (None: none)."""

    def seen(self, name: str, record: Record) -> None:
        """Told of each completed record a listing carries (neighbours of the keys asked for
        too)."""


class RecordWatch:
    """Many keys' records per request: one thread per process and records prefix."""

    def __init__(self, container: ContainerClient, prefix: str, store: Watched) -> None:
        self._container = container
        self._store = store
        self._prefix = f"{prefix}/"
        self._lock = threading.Condition()
        self._waiters: list[_Waiter] = []
        self._thread: threading.Thread | None = None
        #: Ticks paid for by waiting deliveries (TICKS_PER_WAIT each, up to MAX_TOKENS).
        self._tokens = MAX_TOKENS
        self._last_tick = 0.0

    def watch(
        self, name: str, key: str, etag: str | None, until: float
    ) -> tuple[bool, Record | None]:
        """Block until record `name` differs from `etag` (None: absent) or monotonic `until`.
        Returns (changed, record now or last known; None: absent or nothing learnt)."""
        pace = FIRST_TICK
        with self._lock:
            # A wait shares its ticks with the others waiting in the process, so pays part of
            # one; a wait alone has nobody to share with: its tick is its own read, paid whole
            # (at part of one, a process taking keys one at a time would run out and wait
            # MAX_TICK for each key).
            alone = not any(not w.fresh for w in self._waiters)
            self._tokens = min(MAX_TOKENS, self._tokens + (1.0 if alone else TICKS_PER_WAIT))
        return self._wait(
            _Waiter(name, key, etag, until, due=time.monotonic() + pace, interval=pace)
        )

    def read_many(self, names: dict[str, str]) -> dict[str, Record | None]:
        """The records of blob `names` (name: key) now, read at the next tick with every key
        waiting in the process (None: absent); a name the tick could not answer (storage
        trouble) is left out."""
        now = time.monotonic()
        looks = [_Waiter(name, key, None, now + READ_TIMEOUT, due=now, fresh=True)
                 for name, key in names.items()]  # fmt: skip
        with self._lock:
            self._waiters.extend(looks)
            self._ensure_thread()
            self._lock.notify_all()
        for look in looks:
            look.released.wait(max(0.0, look.until - time.monotonic()) + MAX_TICK + 5.0)
        with self._lock:
            self._waiters[:] = [w for w in self._waiters if w not in looks]
        return {look.key: look.record for look in looks if look.changed}

    def _wait(self, waiter: _Waiter) -> tuple[bool, Record | None]:
        with self._lock:
            self._waiters.append(waiter)
            self._ensure_thread()
            self._lock.notify_all()
        waiter.released.wait(max(0.0, waiter.until - time.monotonic()) + MAX_TICK + 5.0)
        with self._lock:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
        return waiter.changed, waiter.record

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=thread_target(self._loop), name="once-watch", daemon=True
            )
            self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._waiters:
                    if not self._lock.wait(30.0) and not self._waiters:
                        self._thread = None
                        return
                now = time.monotonic()
                paid = self._last_tick + (0.0 if self._tokens >= 1.0 else MAX_TICK)
                due = min(
                    min(w.due, w.until) if w.fresh else max(min(w.due, w.until), paid)
                    for w in self._waiters
                )
                if due > now:
                    self._lock.wait(due - now)
                    continue  # a new waiter may be due sooner
                waiting = list(self._waiters)
                if not any(w.fresh for w in waiting):
                    self._tokens = max(0.0, self._tokens - 1.0)
                self._last_tick = now
            try:
                seen = {w.name: w.etag for w in waiting if not w.fresh}
                seen.update({w.name: None for w in waiting if w.fresh})
                states = self._ask(sorted(seen), seen)
            except Exception as error:  # storage trouble: waiters stay until their deadline
                if refused(error) is None:  # (a refusal: each caller's own read raises it)
                    log.warning("run-once watch: %r", error)
                states = {}
                for w in waiting:
                    if w.fresh:
                        self._done(w)  # unanswered: read alone by its caller
            self._release(waiting, states)

    def _release(self, waiting: list[_Waiter], states: dict[str, State]) -> None:
        now = time.monotonic()
        for waiter in waiting:
            state = states.get(waiter.name)
            if state is not None:  # (an absent record's etag is None, as a waiter's that saw none)
                changed = waiter.fresh or _bare(state.etag) != _bare(waiter.etag)
                if changed and state.present and state.record is None:
                    state.record = self._store.read(waiter.key)
                    if state.record is not None and _bare(state.record.etag) == _bare(waiter.etag):
                        changed = False
                if changed:
                    waiter.changed, waiter.record = True, state.record if state.present else None
                    self._done(waiter)
                    continue
                if state.record is not None:
                    waiter.record = state.record
            if now >= waiter.until:
                self._done(waiter)
            elif waiter.due <= now:  # unchanged at its own tick: back off
                waiter.interval = min(MAX_TICK, max(MIN_TICK, waiter.interval * BACKOFF))
                waiter.due = now + waiter.interval

    def _done(self, waiter: _Waiter) -> None:
        with self._lock:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
        waiter.released.set()

    def _ask(self, names: list[str], seen: dict[str, str | None]) -> dict[str, State]:
        """Each name's state: one listing over their common prefix, or a conditional read each."""
        states: dict[str, State] = {}
        if len(names) >= MIN_LIST:
            page = min(PAGE_SIZE, LIST_SLACK * len(names))
            common = os.path.commonprefix(names)  # noqa: RUF071 - by character, as List Blobs
            covered_to = self._list(common, states, page)
            for name in names:
                if name <= covered_to and name not in states:
                    states[name] = State(False)
            names = [n for n in names if n > covered_to]
        for name in names:
            telemetry.storage("watch a record")
            states[name] = self._store.read_unless(name, seen.get(name))
        return states

    def _list(self, prefix: str, states: dict[str, State], page_size: int) -> str:
        """List one page of `prefix`, noting each listed name's state; returns the highest name
        covered (names not listed up to it are absent)."""
        telemetry.storage("watch records")
        try:
            page = list_page(self._container, prefix, page_size)
        except HttpResponseError as error:
            if meaning(error) is Meaning.NO_CONTAINER:
                return "\uffff"
            raise
        for item in page.items:
            etag, record = self._store.listed(item, page.served_at)
            states[item.name] = State(True, etag, record)
            if record is not None and record.status == Status.COMPLETED:
                self._store.seen(item.name, record)
        if not page.next_marker:
            return "\uffff"
        return page.items[-1].name if page.items else ""


def _bare(etag: str | None) -> str | None:
    """An etag without its quotes (listings give it bare, write responses quoted)."""
    return None if etag is None else etag.strip('"')


_watches: dict[tuple[str, str], RecordWatch] = {}
_watches_lock = threading.Lock()


def watch_for(container: ContainerClient, prefix: str, store: Watched) -> RecordWatch:
    """The process's watcher of the records under `prefix` in `container` (made on first use)."""
    ident = (f"{container.url}", prefix)
    with _watches_lock:
        found = _watches.get(ident)
        if found is None:
            found = _watches[ident] = RecordWatch(container, prefix, store)
        return found
