"""The public lease API, independent of where the lease lives (docs/internals.md)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import random
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator
from typing import Self

from blobsingleton import _shutdown as shutdown
from blobsingleton import _telemetry as telemetry
from blobsingleton._events import emit_lease
from blobsingleton._invocation import in_thread, thread_target
from blobsingleton._off_loop import off_loop
from blobsingleton.errors import (
    LeaseError,
    LeaseLost,
    LeaseNotHeld,
    LeaseTimeout,
    StorageUnavailable,
)

log = logging.getLogger("blobsingleton")

MIN_PERIOD = 15.0
MAX_PERIOD = 60.0
DEFAULT_PERIOD = 15.0
DEFAULT_POLL_INTERVAL = 1.0
#: How much earlier than the server may expire the lease we stop trusting it (clock rate drift).
CLOCK_MARGIN = 0.5


#: Between a key's blob name and a slot's number. '@' is never in an encoded key, so a slot's
#: blob never meets another key's.
SLOT_MARK = "@slot"
#: The most holders of one key (`limit`): every attempt of a waiter at the head of the line may ask
#: each of them (one request a slot).
MAX_LIMIT = 64


def check_limit(limit: object) -> int:
    """`limit` if it is a whole number of holders from 1 to `MAX_LIMIT`; `ValueError` else."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be a whole number from 1 to {MAX_LIMIT}, not {limit!r}")
    return limit


def slot_name(lock_blob_name: str, slot: int) -> str:
    return f"{lock_blob_name}{SLOT_MARK}{slot}"


def paced(
    key: str,
    clock: Callable[[], float],
    timeout: float | None,
    blocking: bool,
    delay: Callable[[], float],
) -> Generator[float, None, None]:
    """Sleeps of `delay()` s within `timeout`, then `LeaseTimeout` (at once unless `blocking`)."""
    started = clock()
    while True:
        remaining = None if timeout is None else timeout - (clock() - started)
        if not blocking or (remaining is not None and remaining <= 0):
            raise LeaseTimeout(key, clock() - started)
        wait = delay()
        yield wait if remaining is None else min(wait, remaining)


class BaseLease(ABC):
    """A lease on one key: acquire it, hold it (renewed in the background), release it."""

    def __init__(
        self,
        key: str,
        *,
        period: float = DEFAULT_PERIOD,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        on_lost: Callable[[LeaseLost], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`clock`: the monotonic clock periods are measured on (a test injects its own)."""
        if not MIN_PERIOD <= period <= MAX_PERIOD:  # blob leases last 15 to 60 seconds
            raise ValueError(f"lease period must be 15 to 60 seconds, not {period}")
        self.key = key
        self.period = float(period)
        self.poll_interval = poll_interval
        self.on_lost = on_lost
        #: Set once a loss has been handled: logged and `on_lost` returned.
        self.lost = threading.Event()
        self._token: int | None = None
        self._confirmed_at = 0.0  # monotonic time at which the last acquire/renew was sent
        self._lost_error: LeaseLost | None = None
        self._stop_renewing = threading.Event()
        self._renewer: threading.Thread | None = None
        self._state_lock = threading.Lock()
        self._clock = clock
        self._acquired_at = 0.0  # monotonic: when the current acquisition was taken

    @abstractmethod
    def _try_acquire(self) -> int | None:
        """Take the lease if free and return its fencing token; None when someone holds it."""

    @abstractmethod
    def _renew(self) -> None:
        """Extend the lease by one period; raise `LeaseLost` or `StorageUnavailable`."""

    @abstractmethod
    def _release(self) -> None:
        """Give the lease back."""

    def _waits(
        self, timeout: float | None, blocking: bool, poll_interval: float | None
    ) -> Generator[float, None, None]:
        """Sleeps between a blocking acquire's attempts (jittered polling; a backend may plan its
        own), `LeaseTimeout` once over. The acquire closes the iterator when it ends."""
        interval = poll_interval or self.poll_interval
        return paced(
            self.key, self._clock, timeout, blocking, lambda: interval * random.uniform(0.5, 1.5)
        )

    @property
    def token(self) -> int:
        """The fencing token of the current acquisition: higher than every earlier one."""
        if self._token is None:
            raise LeaseNotHeld(f"lease {self.key!r} is not held")
        return self._token

    @property
    def is_held(self) -> bool:
        """True while acquired, not released, not lost, and not past its last confirmed period."""
        return self._token is not None and self._lost_error is None and not self._expired_locally()

    def acquire(
        self,
        timeout: float | None = None,
        blocking: bool = True,
        poll_interval: float | None = None,
    ) -> Self:
        """Take the lease; wait up to `timeout` seconds (None: forever) unless not `blocking`,
        trying about every `poll_interval` s. `LeaseTimeout` (a `TimeoutError`) if it stays busy."""
        with telemetry.span("blobsingleton.acquire", key=self.key) as started:
            with contextlib.closing(self._waits(timeout, blocking, poll_interval)) as waits:
                while not self._attempt():
                    time.sleep(next(waits))
            self._acquired_telemetry(started)
        return self

    def _acquired_telemetry(self, started: float) -> None:
        self._acquired_at = time.monotonic()
        waited = self._acquired_at - started
        telemetry.WAITED.record(waited, {"decorator": "lease"})
        telemetry.annotate(token=self._token, wait_s=round(waited, 6))

    async def acquire_async(
        self,
        timeout: float | None = None,
        blocking: bool = True,
        poll_interval: float | None = None,
    ) -> Self:
        """`acquire` for coroutines: storage calls run in a thread, waits don't block the loop.
        Cancelled at any point, it leaves the lease free."""
        with telemetry.span("blobsingleton.acquire", key=self.key) as started:
            waits = self._waits(timeout, blocking, poll_interval)
            try:
                while not await off_loop(in_thread(self._attempt), undo=self._give_back_if_taken):
                    await asyncio.sleep(await off_loop(in_thread(lambda: next(waits))))
            finally:
                await off_loop(in_thread(waits.close))
            self._acquired_telemetry(started)
        return self

    def release(self) -> None:
        """Stop renewing and give the lease back. Safe to call twice or after a loss."""
        with self._state_lock:
            if self._token is None:
                return
            token, self._token = self._token, None
        held = time.monotonic() - self._acquired_at
        telemetry.HELD.record(held, {"decorator": "lease"})
        with telemetry.span("blobsingleton.release", key=self.key, token=token, held_s=held):
            self._stop_renewing.set()
            if self._renewer is not None and self._renewer is not threading.current_thread():
                self._renewer.join()
            shutdown.forget(self)
            try:
                self._release()
            except LeaseLost as error:
                log.warning(
                    "lease %s (token %s) was already gone at release: %s", self.key, token, error
                )
            except StorageUnavailable as error:
                log.warning(
                    "lease %s (token %s) not released, it expires by itself: %s",
                    self.key,
                    token,
                    error,
                )

    async def release_async(self) -> None:
        """`release` off the event loop; a cancelled caller still has the lease given back."""
        await off_loop(self.release)

    def _give_back_if_taken(self, taken: bool) -> None:
        if taken:
            self.release()

    def ensure_held(self) -> None:
        """Raise `LeaseLost` unless the lease is surely still ours. Call before side effects."""
        if self._lost_error is not None:
            raise self._lost_error
        if self._token is None:
            raise LeaseNotHeld(f"lease {self.key!r} is not held")
        if self._expired_locally():
            self._declare_lost(
                "not renewed within its period (process paused or storage unreachable)"
            )
            raise self._lost_error  # type: ignore[misc]

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    async def __aenter__(self) -> Self:
        return await self.acquire_async()

    async def __aexit__(self, *exc: object) -> None:
        await self.release_async()

    def _attempt(self) -> bool:
        if self._token is not None:
            raise LeaseError(f"lease {self.key!r} is already held by this object")
        # Confirmed no earlier than now; a backend taking a lease kept from its last turn lowers it.
        self._confirmed_at = self._clock()
        token = self._try_acquire()
        if token is None:
            return False
        with self._state_lock:
            self._token = token
            self._lost_error = None
            self.lost.clear()
            self._stop_renewing.clear()
        self._start_renewing()
        shutdown.remember(self)
        return True

    def _start_renewing(self) -> None:
        self._renewer = threading.Thread(
            target=thread_target(self._renew_loop), name=f"lease-renewal:{self.key}", daemon=True
        )
        self._renewer.start()

    def _expired_locally(self) -> bool:
        return self._clock() >= self._confirmed_at + self.period - CLOCK_MARGIN

    def _renew_loop(self) -> None:
        # A third of the period after the last confirmation (earlier than now for a kept lease).
        wait: float | None = max(0.0, self._confirmed_at + self.period / 3 - self._clock())
        while wait is not None and not self._stop_renewing.wait(wait):
            wait = self._renew_step()

    def _renew_step(self) -> float | None:
        """One renewal: the wait before the next (a third of the period; after a transient
        failure, a second at most until the period runs out), or None once the lease is lost."""
        if self._lost_error is not None:
            return None  # renewing a lease given up for lost would only block the key longer
        interval = self.period / 3
        sent_at = self._clock()
        try:
            self._renew()
        except LeaseLost as error:
            self._declare_lost(error.reason)
            return None
        except StorageUnavailable as error:
            if self._expired_locally():
                self._declare_lost(f"renewal failed until the period ran out: {error}")
                return None
            log.warning("lease %s renewal failed, retrying: %s", self.key, error)
            emit_lease("renewal_failed", self, reason=str(error))
            return min(1.0, interval)
        except Exception as error:  # a bug or unexpected storage answer: still make it visible
            self._declare_lost(f"renewal raised {type(error).__name__}: {error}")
            return None
        self._confirmed_at = sent_at
        return interval

    def _declare_lost(self, reason: str) -> None:
        with self._state_lock:
            if self._lost_error is not None:
                return
            self._lost_error = LeaseLost(self.key, self._token, reason)  # is_held is False now
            self._stop_renewing.set()
        log.error("LEASE LOST: %s", self._lost_error)
        telemetry.LEASES_LOST.add(1)
        emit_lease("lost", self, reason=reason)
        try:
            if self.on_lost is not None:
                self.on_lost(self._lost_error)
        except Exception:
            log.exception("on_lost callback of lease %s failed", self.key)
        finally:
            self.lost.set()  # last, so whoever waits on it sees the loss fully handled


#: The leases the running `@singleton` invocation holds (its guard sets them), and so the lease
#: a `@once` inside it writes its records under.
leases_held: contextvars.ContextVar[tuple[BaseLease, ...]] = contextvars.ContextVar(
    "singleton_leases", default=()
)
