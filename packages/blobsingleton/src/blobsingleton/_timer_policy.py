"""A scheduled `@once` function's policies (catch-up, overlap, grace) and the wrapper that
applies them around its guarded call, on its ledger (`_ledger`) (docs/schedules.md).

`@once(key, schedule=Timer(...))` puts `govern`'s wrapper outside the run-once guard: a firing
reads the function's ledger (at most 2 requests), records the occurrences its catch-up policy
passes over, calls the guarded function for each occurrence it catches up (in order, each a
run-once key like any other, so each runs once whichever instances fire), then for the
firing's own occurrence, under the function's own lease when an overlap policy asks for one.
A plain `schedule="..."` keeps the host's behaviour and only marks the function for its
ledger (`blobsingleton.timers.ledger_of`)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Literal

from opentelemetry import metrics

from blobsingleton import _ledger, schedules
from blobsingleton._connection import resolve_placeholders
from blobsingleton._events import emit
from blobsingleton._keys import TIMER, function_scope, trigger_of
from blobsingleton._lease import BaseLease
from blobsingleton._ledger import Keys, Ledger, Outcome
from blobsingleton._off_loop import off_loop
from blobsingleton._records import RecordStore
from blobsingleton._singleton import default_lease
from blobsingleton.errors import LeaseTimeout, OccurrenceRefused, SettingMissing

log = logging.getLogger("blobsingleton")

#: The attribute a scheduled `@once` function carries: its `Governed` (for its ledger).
ATTRIBUTE = "__blobsingleton_timer__"
#: How long a buffered firing waits for the run before it by default (seconds).
DEFAULT_BUFFER_TIMEOUT = 300.0

_meter = metrics.get_meter("blobsingleton")
#: Occurrences passed over or caught up, by function and outcome (missed, skipped, caught_up).
OCCURRENCES = _meter.create_counter("blobsingleton.timer.occurrences")
#: Occurrences of a timer late past its grace period at the last check, by function.
LATE = _meter.create_gauge("blobsingleton.timer.late")


def _delta(value: timedelta | float, name: str) -> timedelta:
    found = value if isinstance(value, timedelta) else timedelta(seconds=value)
    if found < timedelta(0):
        raise ValueError(f"{name} must be at least 0, not {value!r}")
    return found


@dataclass(frozen=True)
class CatchUp:
    """What a firing does with the occurrences due since the last one in the ledger, not run
    and later than the grace period (Temporal's catch-up window, Quartz's misfire instruction,
    CronJob's startingDeadlineSeconds):

    - `CatchUp.host()` (the default): what the Functions host does today: nothing of its own
      (the host runs one past-due occurrence at start-up, with its schedule monitor);
    - `CatchUp.none()`: each is recorded as missed and never runs (Quartz's DO_NOTHING);
    - `CatchUp.latest(within=1 day)`: the latest within the window runs, as a catch-up; the
      others are recorded missed (Quartz's FIRE_ONCE_NOW, with a window);
    - `CatchUp.each(within=1 day)`: each within the window runs, oldest first; those before it
      are recorded missed (Temporal's catch-up window).
    """

    how: Literal["host", "none", "latest", "each"] = "host"
    within: timedelta | None = None

    @staticmethod
    def host() -> CatchUp:
        return CatchUp("host")

    @staticmethod
    def none() -> CatchUp:
        return CatchUp("none")

    @staticmethod
    def latest(within: timedelta | float = timedelta(days=1)) -> CatchUp:
        return CatchUp("latest", _delta(within, "CatchUp.latest(within=...)"))

    @staticmethod
    def each(within: timedelta | float = timedelta(days=1)) -> CatchUp:
        return CatchUp("each", _delta(within, "CatchUp.each(within=...)"))

    def __str__(self) -> str:
        return f"CatchUp.{self.how}({'' if self.within is None else self.within})"


@dataclass(frozen=True)
class Overlap:
    """What an occurrence does when it comes due while an earlier one still runs, under the
    function's own lease (Temporal's overlap policies of the same names):

    - `Overlap.allow()` (the default, Temporal's AllowAll): nothing is decided here (on one
      host the host never starts a timer's next run before its last returns);
    - `Overlap.skip()` (Skip, CronJob's Forbid): recorded as skipped, never run;
    - `Overlap.buffer_one(timeout=300)` (BufferOne): runs once the earlier run ends; one more
      coming due meanwhile is recorded as skipped;
    - `Overlap.buffer_all(timeout=300)` (BufferAll): each runs in turn once the earlier ends.

    A buffered firing waits in its invocation up to `timeout` s (then `LeaseTimeout`: the
    occurrence stays unrecorded, for the catch-up policy of the next firing).
    """

    how: Literal["allow", "skip", "buffer_one", "buffer_all"] = "allow"
    timeout: float = DEFAULT_BUFFER_TIMEOUT

    @staticmethod
    def allow() -> Overlap:
        return Overlap("allow")

    @staticmethod
    def skip() -> Overlap:
        return Overlap("skip")

    @staticmethod
    def buffer_one(timeout: timedelta | float = DEFAULT_BUFFER_TIMEOUT) -> Overlap:
        return Overlap("buffer_one", _delta(timeout, "timeout").total_seconds())

    @staticmethod
    def buffer_all(timeout: timedelta | float = DEFAULT_BUFFER_TIMEOUT) -> Overlap:
        return Overlap("buffer_all", _delta(timeout, "timeout").total_seconds())


@dataclass(frozen=True)
class Timer:
    """A timer's schedule and what happens between its occurrences: `@once("nightly-
    {occurrence}", schedule=Timer("%IMPORT_SCHEDULE%", catch_up=CatchUp.latest(within=
    timedelta(days=1))))`. `grace`: how late an occurrence may start and still count as on
    time (Quartz's misfire threshold, 60 s as its default); later, it is a catch-up, and
    without a record it is late (`timers.check`)."""

    schedule: str
    catch_up: CatchUp = CatchUp()
    overlap: Overlap = Overlap()
    grace: timedelta = timedelta(seconds=60)

    HOST_DEFAULTS: ClassVar[tuple[CatchUp, Overlap]] = (CatchUp(), Overlap())

    def __post_init__(self) -> None:
        if not isinstance(self.catch_up, CatchUp) or not isinstance(self.overlap, Overlap):
            raise TypeError(
                "Timer(catch_up=CatchUp.none()/latest()/each()/host(), overlap=Overlap.skip()/"
                f"buffer_one()/buffer_all()/allow()), not {self.catch_up!r}, {self.overlap!r}"
            )
        object.__setattr__(self, "grace", _delta(self.grace, "Timer(grace=...)"))

    @classmethod
    def of(cls, schedule: str | Timer | None) -> Timer | None:
        if schedule is None or isinstance(schedule, Timer):
            return schedule
        if not isinstance(schedule, str):
            raise TypeError(f"schedule= takes a schedule or a Timer(...), not {schedule!r}")
        return cls(schedule)

    @property
    def as_host(self) -> bool:
        """The host's behaviour: nothing to do around the guarded call."""
        return (self.catch_up, self.overlap) == self.HOST_DEFAULTS


@dataclass(frozen=True)
class Plan:
    """What a firing does before its own occurrence: catch-ups to run (in order) and
    occurrences to record as missed."""

    catch_ups: tuple[datetime, ...] = ()
    missed: tuple[datetime, ...] = ()


#: Outcomes after which earlier occurrences are settled (a catch-up starts after them).
_SETTLED = frozenset({Outcome.RAN, Outcome.CAUGHT_UP, Outcome.MISSED, Outcome.SKIPPED,
                      Outcome.FAILED})  # fmt: skip


def plan(ledger: Ledger, occurrence: datetime, timer: Timer) -> Plan:
    """The catch-up policy applied to `ledger` for a firing of `occurrence` (pure)."""
    policy = timer.catch_up
    if policy.how == "host":
        return Plan()
    at = ledger.now
    settled = [e.occurrence for e in ledger.entries if e.outcome in _SETTLED]
    since = max(settled) if settled else None
    own = ledger.entry(occurrence)
    late = [
        e.occurrence for e in ledger.entries
        if since is not None and e.occurrence > since and e.occurrence != occurrence
        and at - e.occurrence > timer.grace
        and (e.outcome == Outcome.LATE or _catching_up(e, timer.grace))
    ]  # fmt: skip
    if at - occurrence > timer.grace and (own is None or not own.recorded):
        late.append(occurrence)  # a late firing (the host's past-due run, an HTTP call)
    late.sort()
    window = [o for o in late if policy.within is None or at - o <= policy.within]
    run = [] if policy.how == "none" else window[-1:] if policy.how == "latest" else window
    unrecorded = {e.occurrence for e in ledger.entries if not e.recorded}
    missed = [o for o in late if o not in run and (o in unrecorded or o == occurrence)]
    return Plan(tuple(o for o in run if o != occurrence), tuple(missed))


def _catching_up(entry: _ledger.Entry, grace: timedelta) -> bool:
    """A catch-up in progress (started later than the grace period): a firing that finds one
    calls it too, so catch-ups stay in order (its guard waits or replays)."""
    return (entry.outcome == Outcome.RUNNING and entry.started is not None
            and entry.started - entry.occurrence > grace)  # fmt: skip


def catch_up_timer(occurrence: datetime, past_due: bool = True) -> Any:
    """The timer argument of a run of `occurrence` the host did not fire: `Next` is the
    occurrence (as in the host's past-due run), so `{occurrence}` and
    `schedules.fired_occurrence` name it."""
    iso = occurrence.astimezone(UTC).strftime(_ledger.ISO)
    status = {"Last": "0001-01-01T00:00:00", "Next": iso, "LastUpdated": iso}
    try:
        from azure.functions.timer import TimerRequest  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError:  # pragma: no cover - the worker's SDK is not installed
        return _Timer(past_due, status)
    return TimerRequest(past_due=past_due, schedule_status=status)


@dataclass(frozen=True)
class _Timer:
    past_due: bool
    schedule_status: dict[str, Any]


@dataclass
class Governed:
    """One scheduled `@once` function: its timer, keys, records and overlap lease."""

    timer: Timer
    keys: Keys
    function: str
    records: Callable[[], RecordStore]
    retention: float
    lease: Callable[[], BaseLease]

    def ledger(self, at: datetime | None = None, since: datetime | None = None) -> Ledger:
        """The ledger (at most 2 requests), looking back far enough for the catch-up window."""
        at = at or _ledger.now()
        within = self.timer.catch_up.within
        if since is None and within is not None:
            parsed = schedules.parse_schedule(resolve_placeholders(self.timer.schedule))
            since = at - max(within + self.timer.grace, _ledger.lookback(parsed, at))
        return _ledger.read(
            self.records(), self.keys, self.timer.schedule, function=self.function, at=at,
            since=since, grace=self.timer.grace,
        )  # fmt: skip

    def mark(self, occurrence: datetime, outcome: Outcome, reason: str) -> None:
        if _ledger.mark(self.records(), self.keys, occurrence, outcome, reason, self.retention):
            iso = occurrence.strftime(_ledger.ISO)
            emit(f"timer_{outcome}", warning=outcome == Outcome.MISSED, function=self.function,
                 occurrence=iso, reason=reason)  # fmt: skip
            OCCURRENCES.add(1, {"function": self.function, "outcome": str(outcome)})

    def fire(self, timer_arg: Any, run: Callable[[datetime | None], Any]) -> Any:
        """One firing: policies, catch-ups (`run(occurrence)`), then its own (`run(None)`)."""
        found = self._occurrence(timer_arg)
        if found is None:
            return run(None)  # no occurrence: the key template's error says why
        occurrence, at = found
        with self._overlap(occurrence, at) as proceed:
            if not proceed:
                return None
            for moment in self._catch_ups(occurrence, at):
                run(moment)
            return run(None)

    async def fire_async(
        self, timer_arg: Any, run: Callable[[datetime | None], Awaitable[Any]]
    ) -> Any:
        """`fire` for an async function: storage off the event loop (a cancelled firing gives
        its lease back)."""
        found = self._occurrence(timer_arg)
        if found is None:
            return await run(None)
        occurrence, at = found
        overlap = self._overlap(occurrence, at)

        def give_back(_: bool) -> None:  # cancelled while taking the lease
            overlap.__exit__(None, None, None)

        proceed = await off_loop(overlap.__enter__, undo=give_back)
        try:
            result = None
            if proceed:
                for moment in await off_loop(lambda: self._catch_ups(occurrence, at)):
                    await run(moment)
                result = await run(None)
        except BaseException as error:
            exit_ = functools.partial(overlap.__exit__, type(error), error, error.__traceback__)
            if not await off_loop(exit_):
                raise
            return None
        await off_loop(lambda: overlap.__exit__(None, None, None))
        return result

    def _occurrence(self, timer_arg: Any) -> tuple[datetime, datetime] | None:
        """The occurrence a firing stands for and the time it is judged at (None: unreadable)."""
        at = _ledger.now()
        try:
            text = resolve_placeholders(self.timer.schedule)
            return schedules.fired_occurrence(text, timer_arg.schedule_status, at), at
        except (SettingMissing, schedules.InvalidSchedule, schedules.NoOccurrence):
            return None

    def _catch_ups(self, occurrence: datetime, at: datetime) -> tuple[datetime, ...]:
        """The catch-up policy applied: misses recorded, the catch-ups to run (in order)."""
        if self.timer.catch_up.how == "host":
            return ()  # nothing to plan: no ledger to read
        steps = plan(self.ledger(at), occurrence, self.timer)
        for moment in steps.missed:
            self.mark(moment, Outcome.MISSED, f"{self.timer.catch_up}: {_late(at - moment)} late")
        for moment in steps.catch_ups:
            emit("timer_catch_up", function=self.function, occurrence=moment.strftime(_ledger.ISO))
            OCCURRENCES.add(1, {"function": self.function, "outcome": "caught_up"})
        return steps.catch_ups

    @contextlib.contextmanager
    def _overlap(self, occurrence: datetime, at: datetime) -> Iterator[bool]:
        """Held the function's lease as the overlap policy asks (True: go on; False: this
        occurrence was recorded as skipped)."""
        policy = self.timer.overlap
        if policy.how == "allow":
            yield True
            return
        lease = self.lease()
        waited = False
        try:
            lease.acquire(blocking=False)
        except LeaseTimeout:
            ledger = self.ledger(at)
            own = ledger.entry(occurrence)
            if own is not None and own.recorded:
                yield True  # a duplicate firing: the guard replays or waits as its policy says
                return
            earlier = _running_before(ledger, occurrence)
            if policy.how == "skip" and earlier is not None:
                self.mark(occurrence, Outcome.SKIPPED, _overlap_reason(policy, earlier))
                yield False
                return
            lease.acquire(timeout=policy.timeout)
            waited = True
        try:
            if waited and policy.how == "buffer_one":
                ledger = self.ledger(at)
                own = ledger.entry(occurrence)
                buffered = _started_after(ledger, occurrence, at)
                if (own is None or not own.recorded) and buffered is not None:
                    self.mark(occurrence, Outcome.SKIPPED, _overlap_reason(policy, buffered))
                    yield False
                    return
            yield True
        finally:
            lease.release()


def _late(late: timedelta) -> str:
    return f"{int(late.total_seconds())} s"


def _overlap_reason(policy: Overlap, earlier: _ledger.Entry) -> str:
    what = "still running" if earlier.outcome == Outcome.RUNNING else "buffered before it"
    return f"Overlap.{policy.how}(): {earlier.occurrence.strftime(_ledger.ISO)} {what}"


def _running_before(ledger: Ledger, occurrence: datetime) -> _ledger.Entry | None:
    """A run of an earlier occurrence in progress that started on time (within the grace
    period): an overlap. One that started later is a catch-up, whose runner goes on to the
    occurrences after it, this one included."""
    for entry in ledger.entries:
        if (entry.outcome == Outcome.RUNNING and entry.occurrence < occurrence
                and entry.started is not None
                and entry.started - entry.occurrence <= ledger.grace):  # fmt: skip
            return entry
    return None


def _started_after(ledger: Ledger, occurrence: datetime, arrived: datetime) -> _ledger.Entry | None:
    """An earlier occurrence whose run started after this firing `arrived` and began to wait:
    it was buffered ahead of this one, which is a second buffered (BufferOne keeps one)."""
    runs = (Outcome.RAN, Outcome.CAUGHT_UP, Outcome.RUNNING)
    for entry in ledger.entries:
        if (entry.outcome in runs and entry.occurrence < occurrence
                and entry.started is not None and entry.started > arrived):  # fmt: skip
            return entry
    return None


def govern(
    wrapper: Callable[..., Any], fn: Callable[..., Any], key: str, timer: Timer,
    retention: float, *, records: Callable[[], RecordStore], **where: Any,
) -> Callable[..., Any]:  # fmt: skip
    """`wrapper` (the guarded `fn`) under `timer`'s policies, marked for its ledger; its
    records are `records()`'s, its overlap lease where `where` (storage, namespace) says."""
    try:
        keys = Keys.of(key)
    except ValueError:
        if timer.as_host:
            return wrapper  # the host's behaviour, and no ledger to read by occurrence
        raise
    lease = overlap_lease(fn, timer, **where)
    spec = Governed(timer, keys, fn.__qualname__, records, retention, lease)
    if timer.as_host:
        setattr(wrapper, ATTRIBUTE, spec)
        return wrapper
    signature = inspect.signature(fn)

    def timer_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, Any] | None:
        bound = signature.bind(*args, **kwargs).arguments
        return next(((n, v) for n, v in bound.items() if trigger_of(v) is TIMER), None)

    def call_for(name: str, occurrence: datetime | None, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> Any:  # fmt: skip
        """`wrapper`'s call for `occurrence` (None: the firing's own arguments)."""
        if occurrence is None:
            return wrapper(*args, **kwargs)
        again = signature.bind(*args, **kwargs)
        again.arguments[name] = catch_up_timer(occurrence)
        return wrapper(*again.args, **again.kwargs)

    governed: Callable[..., Any]
    if inspect.iscoroutinefunction(fn):

        async def governed_async(*args: Any, **kwargs: Any) -> Any:
            found = timer_of(args, kwargs)
            if found is None:
                return await wrapper(*args, **kwargs)  # no timer: the key template says why
            name, value = found
            return await spec.fire_async(value, lambda o: call_for(name, o, args, kwargs))

        governed = governed_async
    else:

        def governed_sync(*args: Any, **kwargs: Any) -> Any:
            found = timer_of(args, kwargs)
            if found is None:
                return wrapper(*args, **kwargs)  # no timer: the key template says what is wrong
            name, value = found
            return spec.fire(value, lambda o: call_for(name, o, args, kwargs))

        governed = governed_sync
    functools.update_wrapper(governed, wrapper)  # its name, `each`, busy policies, signature
    setattr(governed, ATTRIBUTE, spec)
    return governed


def governed_of(fn: Callable[..., Any]) -> Governed:
    spec = getattr(fn, ATTRIBUTE, None)
    if not isinstance(spec, Governed):
        raise TypeError(
            f"{getattr(fn, '__qualname__', fn)!r} is not a scheduled @once function "
            "(@once('...{occurrence}', schedule=...))"
        )
    return spec


def fire_late(fn: Callable[..., Any], occurrence: datetime | None = None) -> Any:
    """Run `fn`'s `occurrence` (default: the latest due) as an external scheduler's call
    does: on time within the grace period, late within the catch-up window, else refused
    (`OccurrenceRefused`, with the reason); the run-once key is the timer's, so a timer's
    firing and this call run the occurrence once."""
    spec = governed_of(fn)
    timer = spec.timer
    parsed = schedules.parse_schedule(resolve_placeholders(timer.schedule))
    if not isinstance(parsed, schedules.CronSchedule):
        raise OccurrenceRefused(spec.function, None, "a TimeSpan schedule has no occurrences")
    at = _ledger.now()
    if occurrence is None:
        occurrence = parsed.previous_at_or_before(at + schedules.EARLY_FIRE)
    occurrence = (occurrence if occurrence.tzinfo else occurrence.replace(tzinfo=UTC)).astimezone(
        UTC
    )
    if parsed.next_after(occurrence - timedelta(seconds=1)) != occurrence:
        raise OccurrenceRefused(spec.function, occurrence, f"not an occurrence of {parsed.text!r}")
    if occurrence > at + schedules.EARLY_FIRE:
        raise OccurrenceRefused(spec.function, occurrence, "not due yet")
    late = at - occurrence
    if late > timer.grace:
        within = timer.catch_up.within
        latest = parsed.previous_at_or_before(at)
        if timer.catch_up.how == "none":
            raise OccurrenceRefused(
                spec.function, occurrence, f"{_late(late)} late and the catch-up policy is none"
            )
        if timer.catch_up.how == "host" and occurrence != latest:
            raise OccurrenceRefused(
                spec.function, occurrence,
                f"{_late(late)} late and not the latest occurrence (the host's catch-up)",
            )  # fmt: skip
        if within is not None and late > within:
            raise OccurrenceRefused(
                spec.function, occurrence,
                f"{_late(late)} late, outside the catch-up window ({_late(within)})",
            )  # fmt: skip
    return fn(catch_up_timer(occurrence, past_due=late > timer.grace))


def overlap_lease(fn: Callable[..., Any], timer: Timer, **where: Any) -> Callable[[], BaseLease]:
    """The function's own lease its overlap policy holds (fair under a buffer: buffered
    firings take it in turn)."""
    fair = timer.overlap.how.startswith("buffer")

    def make() -> BaseLease:
        lease: BaseLease = default_lease(
            "timer-overlap", fair=fair, scope=function_scope(fn), **where
        )
        return lease

    return make
