"""The real `BaseLease` against a model of Blob Storage's lease rules, under any interleaving.

Hypothesis drives several clients on one key through acquire, renew, release, a renewal that
storage does not answer, crash (the process is gone, its lease left to expire), pause and
resume (no renewal while time passes), fenced writes and the passing of time. The library's
own code decides; the model only predicts what storage would answer. After every step:

- at most one client believes it holds the key (`is_held`), and that client is the one
  storage has leased it to;
- every fencing token is higher than all earlier ones, and a write fenced by the token of a
  client that passed `ensure_held()` is never refused by a store that keeps the highest token:
  no two holders whose fencing tokens the store accepts;
- a client whose lease was taken, or whose period passed unrenewed, knows it (`ensure_held`
  raises `LeaseLost`, `lost` is set once a renewal found out).

Runs on the in-memory backend in milliseconds; the Azurite twin of each rule is in
test_blob_lease.py and test_processes.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from blobsingleton import LeaseLost, LeaseTimeout
from blobsingleton._lease import CLOCK_MARGIN
from blobsingleton.testing import FakeClock, MemoryLocks
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from libsupport import SteppedLease

PERIOD = 15.0
CLIENTS = 3
KEY = "k"
# Steps that land just before, on and just after the edges that matter: a third of the
# period (renewal), the local expiry (period minus the clock margin) and the period itself.
TICKS = st.sampled_from([0.25, 1.0, 4.0, 5.0, 9.5, 14.0, 14.5, 15.0, 16.0])


@dataclass
class Client:
    lease: SteppedLease
    state: str = "idle"  # idle | holding | paused
    confirmed_at: float = 0.0  # when the last acquire/renew that succeeded was sent


class LeaseModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.locks = MemoryLocks(self.clock)
        self.clients = [self._new_client() for _ in range(CLIENTS)]
        # What storage holds, as the model predicts it.
        self.holder: int | None = None
        self.expires = 0.0
        self.tokens: list[int] = []
        self.highest_written = 0  # the fenced store: it refuses any token below this

    def _new_client(self) -> Client:
        return Client(SteppedLease(KEY, self.locks, period=PERIOD))

    def _leased_to(self) -> int | None:
        return self.holder if self.holder is not None and self.clock() < self.expires else None

    def _holding(self) -> list[int]:
        return [i for i, c in enumerate(self.clients) if c.state == "holding"]

    def _paused(self) -> list[int]:
        return [i for i, c in enumerate(self.clients) if c.state == "paused"]

    # -- rules -----------------------------------------------------------------------------------
    @rule(i=st.integers(0, CLIENTS - 1))
    def acquire(self, i: int) -> None:
        client = self.clients[i]
        if client.state != "idle":
            return
        free = self._leased_to() is None
        try:
            client.lease.acquire(blocking=False)
        except LeaseTimeout:
            assert not free, "storage had the key free, yet the acquire was refused"
            return
        assert free, "acquired a key storage had leased to another client"
        assert not self.tokens or client.lease.token > self.tokens[-1]
        self.tokens.append(client.lease.token)
        self.holder, self.expires = i, self.clock() + PERIOD
        client.state, client.confirmed_at = "holding", self.clock()

    @precondition(lambda self: self._holding())
    @rule(data=st.data())
    def renew(self, data: st.DataObject) -> None:
        i = data.draw(st.sampled_from(self._holding()))
        client = self.clients[i]
        already_lost = client.lease.lost.is_set()
        wait = client.lease.renew_now()
        if already_lost:  # given up for lost: never renewed again, storage's lease runs out
            assert wait is None
            return
        if self.holder == i:  # ours, even if expired: nobody leased it since
            assert wait == pytest.approx(PERIOD / 3)
            self.expires, client.confirmed_at = self.clock() + PERIOD, self.clock()
            assert client.lease.is_held
        else:
            assert wait is None and client.lease.lost.is_set() and not client.lease.is_held

    @precondition(lambda self: self._holding())
    @rule(data=st.data())
    def renewal_not_answered(self, data: st.DataObject) -> None:
        """Storage does not answer one renewal: retried soon, or lost once the period ran out."""
        client = self.clients[data.draw(st.sampled_from(self._holding()))]
        if client.lease.lost.is_set():
            return
        self.locks.failing_renewals = 1
        wait = client.lease.renew_now()
        if self.clock() >= client.confirmed_at + PERIOD - CLOCK_MARGIN:
            assert wait is None and client.lease.lost.is_set()
        else:
            assert wait is not None and wait <= 1.0 and not client.lease.lost.is_set()

    @precondition(lambda self: self._holding())
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        i = data.draw(st.sampled_from(self._holding()))
        self.clients[i].lease.release()
        assert not self.clients[i].lease.is_held
        if self.holder == i:
            self.holder = None
        self.clients[i].state = "idle"
        self.clients[i] = self._new_client()

    @precondition(lambda self: self._holding() + self._paused())
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        """The process dies: nothing is released, the lease stays until it expires."""
        held = self._holding() + self._paused()
        self.clients[data.draw(st.sampled_from(held))] = self._new_client()

    @precondition(lambda self: self._holding())
    @rule(data=st.data())
    def pause(self, data: st.DataObject) -> None:
        self.clients[data.draw(st.sampled_from(self._holding()))].state = "paused"

    @precondition(lambda self: self._paused())
    @rule(data=st.data())
    def resume(self, data: st.DataObject) -> None:
        self.clients[data.draw(st.sampled_from(self._paused()))].state = "holding"

    @precondition(lambda self: self._holding())
    @rule(data=st.data())
    def fenced_write(self, data: st.DataObject) -> None:
        """A side effect guarded as the README says: `ensure_held()`, then write with the token."""
        i = data.draw(st.sampled_from(self._holding()))
        client = self.clients[i]
        stale = (
            client.lease.lost.is_set()
            or self.clock() >= client.confirmed_at + PERIOD - CLOCK_MARGIN
        )
        try:
            client.lease.ensure_held()
        except LeaseLost:
            assert stale, "ensure_held refused a lease storage still had for this client"
            return
        assert not stale, "ensure_held passed for a lease that was lost or unrenewed too long"
        token = client.lease.token
        assert token >= self.highest_written, "a holder's write would be refused by fencing"
        assert self._leased_to() == i
        self.highest_written = token

    @rule(seconds=TICKS)
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)

    # -- invariants ------------------------------------------------------------------------------
    @invariant()
    def at_most_one_holder_and_it_is_storages(self) -> None:
        believers = [i for i, c in enumerate(self.clients) if c.lease.is_held]
        assert len(believers) <= 1, f"clients {believers} all believe they hold {KEY!r}"
        for i in believers:
            assert self._leased_to() == i

    @invariant()
    def tokens_strictly_increase(self) -> None:
        assert self.tokens == sorted(set(self.tokens))

    @precondition(lambda self: self.tokens)
    @invariant()
    def storage_agrees_on_the_token(self) -> None:
        assert self.locks.locks[KEY].token == self.tokens[-1]


LeaseModel.TestCase.settings = settings(
    max_examples=max(150, settings.default.max_examples),  # the --long profile asks for more
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestLeaseModel = LeaseModel.TestCase
