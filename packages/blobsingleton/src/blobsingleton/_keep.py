"""What one process remembers about the lines of the keys it contends for (docs/internals.md)."""

from __future__ import annotations

import logging
import multiprocessing.util
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from blobsingleton import _shutdown as shutdown
from blobsingleton.errors import LeaseError

log = logging.getLogger("blobsingleton")

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


shutdown.also_release(hand_on_all)
# Children of `multiprocessing` end with os._exit, past atexit: run at their exit too.
multiprocessing.util.Finalize(None, hand_on_all, exitpriority=100)
