"""A model check of the waiting line (`FairLease`), in the spirit of a TLA+ spec.

Blob Storage's lease operations are modelled with their documented semantics (Acquire with a
proposed id succeeds on a free lease or one that already has that id; Change Lease keeps the
expiry; an unrenewed lease expires after its period), and clients follow the line protocol:
take a ticket, stand in line, only the head polls, a release hands the lease to the first
live entry. (The library's waiters further back also ask now and then, on a plan from their
place, with the same Acquire Lease; that can only succeed on a free lease, after a crash or a
release that found the line empty, so it never touches the safety checked here, and may
serve such a waiter once before the head, which this model does not explore. A process
keeping its lease for its own next turn is a holder that has not released yet.)

Hypothesis drives any interleaving of waits, polls, releases, renewals, crashes,
pauses and the passing of time, and checks after every step:

- the storage never gives out a token twice, and tokens only grow (fencing);
- at most one client that is not paused believes it holds a live lease;

and at the end that nobody starves: once the faults stop, every live waiter gets the key, in
ticket order among those that kept their place (a waiter paused for a whole period is taken
for dead and loses it, but is still served).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

PERIOD = 15.0
HEAD_POLL = 0.2
CLIENTS = 4


@dataclass
class Storage:
    """One key's lock blob, ticket blob and line entries, as the service keeps them."""

    now: float = 0.0
    lease_id: str | None = None
    expires: float = 0.0
    sequence: int = 0
    tickets: int = 0
    entries: dict[int, tuple[str, float]] = field(default_factory=dict)  # ticket -> id, refreshed

    def active(self) -> bool:
        return self.lease_id is not None and self.now < self.expires

    def acquire(self, lease_id: str) -> bool:
        if self.active() and self.lease_id != lease_id:
            return False
        self.lease_id, self.expires = lease_id, self.now + PERIOD
        return True

    def renew(self, lease_id: str) -> bool:
        # A lease that expired may be renewed while nobody else took it (the service's rule).
        if self.lease_id != lease_id:
            return False
        self.expires = self.now + PERIOD
        return True

    def change(self, lease_id: str, to: str) -> bool:
        if not self.active() or self.lease_id != lease_id:
            return False
        self.lease_id = to
        return True

    def release(self, lease_id: str) -> bool:
        if not self.active() or self.lease_id != lease_id:
            return False
        self.lease_id = None
        return True

    def next_token(self, lease_id: str) -> int | None:
        if not self.active() or self.lease_id != lease_id:
            return None
        self.sequence += 1
        return self.sequence

    def live(self) -> list[tuple[int, str]]:
        return sorted((t, i) for t, (i, at) in self.entries.items() if self.now - at <= PERIOD)


@dataclass
class Client:
    name: int
    state: str = "idle"  # idle | waiting | holding | crashed
    lease_id: str = ""
    ticket: int | None = None
    head: bool = False
    token: int | None = None
    paused_until: float = 0.0
    refreshed: float = 0.0


class LineModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.storage = Storage()
        self.clients = [Client(i) for i in range(CLIENTS)]
        self.ids = itertools.count(1)
        self.tokens_given: list[int] = []

    # -- the protocol, as _line.py implements it ---------------------------------
    def _running(self, c: Client) -> bool:
        return c.state != "crashed" and self.storage.now >= c.paused_until

    def _got(self, c: Client) -> None:
        token = self.storage.next_token(c.lease_id)
        assert token is not None  # we hold it: the increment under our lease succeeds
        self.tokens_given.append(token)
        c.state, c.token = "holding", token
        if c.ticket is not None:
            self.storage.entries.pop(c.ticket, None)  # leave the line
        c.ticket, c.head = None, False

    @rule(i=st.integers(0, CLIENTS - 1))
    def ask(self, i: int) -> None:
        c = self.clients[i]
        if c.state != "idle" or not self._running(c):
            return
        c.lease_id = f"id{next(self.ids)}"
        if self.storage.acquire(c.lease_id):
            self._got(c)
            return
        self.storage.tickets += 1
        c.state, c.ticket, c.head = "waiting", self.storage.tickets, False
        self.storage.entries[c.ticket] = (c.lease_id, self.storage.now)
        c.refreshed = self.storage.now

    @rule(i=st.integers(0, CLIENTS - 1))
    def poll(self, i: int) -> None:
        c = self.clients[i]
        if c.state != "waiting" or not self._running(c):
            return
        assert c.ticket is not None
        if self.storage.now - c.refreshed > PERIOD / 3:
            self.storage.entries[c.ticket] = (c.lease_id, self.storage.now)
            c.refreshed = self.storage.now
        if not c.head:
            c.head = all(t >= c.ticket for t, _ in self.storage.live())
        if c.head and self.storage.acquire(c.lease_id):
            self._got(c)

    @rule(i=st.integers(0, CLIENTS - 1))
    def release(self, i: int) -> None:
        c = self.clients[i]
        if c.state != "holding" or not self._running(c):
            return
        for _, waiter_id in self.storage.live():
            if waiter_id != c.lease_id:
                self.storage.change(c.lease_id, waiter_id)
                break
        else:
            self.storage.release(c.lease_id)
        c.state, c.token = "idle", None

    @rule(i=st.integers(0, CLIENTS - 1))
    def renew(self, i: int) -> None:
        c = self.clients[i]
        if c.state == "holding" and self._running(c) and not self.storage.renew(c.lease_id):
            c.state, c.token = "idle", None  # lost: it learns so and stops

    @rule(i=st.integers(0, CLIENTS - 1))
    def crash(self, i: int) -> None:
        self.clients[i].state = "crashed"  # no cleanup at all: its entry and lease just age

    @rule(i=st.integers(0, CLIENTS - 1), seconds=st.floats(1.0, 40.0))
    def pause(self, i: int, seconds: float) -> None:
        self.clients[i].paused_until = self.storage.now + seconds

    @rule(seconds=st.sampled_from([0.05, HEAD_POLL, 1.0, 5.0, 16.0]))
    def time_passes(self, seconds: float) -> None:
        self.storage.now += seconds

    # -- safety, after every step ---------------------------------------------------------------
    @invariant()
    def tokens_only_grow(self) -> None:
        assert self.tokens_given == sorted(set(self.tokens_given))

    @invariant()
    def one_live_holder(self) -> None:
        live_holders = [
            c for c in self.clients
            if c.state == "holding" and self._running(c) and self.storage.lease_id == c.lease_id
            and self.storage.active()
        ]  # fmt: skip
        assert len(live_holders) <= 1

    # -- liveness, once the faults stop ---------------------------------------------------------
    def teardown(self) -> None:
        for c in self.clients:
            c.paused_until = 0.0
        waiting = sorted(
            (c.ticket, c.name) for c in self.clients if c.state == "waiting" and c.ticket
        )
        live_at_start = {t for t, _ in self.storage.live()}
        served: list[int] = []
        for _ in range(2000):
            if all(self.clients[n].state != "waiting" for _, n in waiting):
                break
            self.storage.now += HEAD_POLL
            for c in self.clients:
                if c.state == "holding":
                    self.release(c.name)
                elif c.state == "waiting":
                    self.poll(c.name)
                    if c.state == "holding":
                        served.append(c.name)
        starved = [n for _, n in waiting if self.clients[n].state == "waiting"]
        assert not starved, f"waiters {starved} never got the key"
        # Arrival order holds among waiters that kept their place; one that went a whole
        # period without refreshing (paused) was taken for dead and lost it.
        in_place = [n for t, n in waiting if t in live_at_start]
        assert [n for n in served if n in in_place] == in_place, "not served in ticket order"


TestLineModel = LineModel.TestCase
