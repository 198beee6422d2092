"""Timer trigger listener with the host's schedule monitor and, optionally, its listener lock.

`every` mode fires every timer on every instance (what a naive scale-out does); `once` mode
fires only on the instance holding the listener lease `{hostId}/{function}.Listener`, like the
real host's Listener-mode singleton. The schedule monitor keeps
`azure-webjobs-hosts/timers/{hostId}/{function}/status` = {Last, Next, LastUpdated}; when the
stored Next has passed at start-up there is ONE catch-up run with past_due=True.
No retry on failure, like the host.

As the host's `TimerListener`: the schedule (`blobsingleton.schedules`, with the host's
daylight-saving rules: an interval fires in both passes of a repeated hour, a point in time
once) is followed from the time each firing started, moved up to the occurrence it stood for
if it fired early; the function sees the schedule status only when the monitor is on, and the
monitor is off for schedules that fire more often than once a minute. A `Clock` can be
injected (tests replay a night with a clock change in milliseconds).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

import blobsingleton
import blobsingleton.config
from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.functions.timer import TimerRequest
from blobsingleton.errors import SettingMissing
from blobsingleton.schedules import InvalidSchedule, Schedule, parse_schedule

from devhost.host_retry import HostRetry
from devhost.indexing import IndexedFunction, TimerTrigger
from devhost.invocation import invoke
from devhost.request_counting import RequestCounter
from devhost.stats import WorkerStats

log = logging.getLogger("devhost.timer")

HOSTS_CONTAINER = "azure-webjobs-hosts"
LISTENER_LEASE_PERIOD = 60.0
#: How often a non-holder retries the listener lease (the host's 60 s, scaled down).
LISTENER_RECOVERY_INTERVAL = 10.0
NEVER = datetime.min.replace(tzinfo=UTC)
TIMER_MODES = ("every", "once")
RESTART_DELAY = 5.0


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def _parse(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _now() -> datetime:
    return datetime.now(UTC)


class Clock(Protocol):
    """Where a timer listener reads the time and waits."""

    def now(self) -> datetime: ...

    def wait(self, stop: threading.Event, seconds: float) -> None: ...


class SystemClock:
    """The machine's clock; waiting ends early when `stop` is set."""

    def now(self) -> datetime:
        return _now()

    def wait(self, stop: threading.Event, seconds: float) -> None:
        stop.wait(seconds)


class ScheduleMonitor:
    """The status blob of one timer function, read and written unconditionally like the host."""

    def __init__(
        self, function_name: str, counter: RequestCounter, clock: Clock | None = None
    ) -> None:
        self._clock = clock or SystemClock()
        account = blobsingleton.config.from_settings("AzureWebJobsStorage")
        host_options = {"raw_request_hook": counter, "retry_policy": HostRetry()}
        service = account.with_options(**host_options).blob_service()
        self.blob_name = f"timers/{blobsingleton.config.host_id()}/{function_name}/status"
        self._container = service.get_container_client(HOSTS_CONTAINER)
        self._blob = self._container.get_blob_client(self.blob_name)

    def read(self) -> dict[str, str] | None:
        try:
            data = json.loads(self._blob.download_blob().readall())
        except ResourceNotFoundError:
            return None
        except ValueError:
            log.warning("timer status %s is not JSON: ignoring it", self.blob_name)
            return None
        return data if isinstance(data, dict) else None

    def write(self, last: datetime, next_: datetime) -> dict[str, str]:
        status = {"Last": _iso(last), "Next": _iso(next_), "LastUpdated": _iso(self._clock.now())}
        payload = json.dumps(status).encode()
        try:
            self._blob.upload_blob(payload, overwrite=True)
        except ResourceNotFoundError:
            with contextlib.suppress(ResourceExistsError):
                self._container.create_container()
            self._blob.upload_blob(payload, overwrite=True)
        return status


class TimerListener:
    """Fires one timer function on its schedule until stopped."""

    def __init__(
        self,
        function: IndexedFunction,
        host_counter: RequestCounter,
        stats: WorkerStats,
        mode: str = "every",
        clock: Clock | None = None,
    ) -> None:
        assert isinstance(function.trigger, TimerTrigger)
        if mode not in TIMER_MODES:
            raise ValueError(f"timer mode must be one of {TIMER_MODES}: {mode!r}")
        self.function = function
        self.trigger: TimerTrigger = function.trigger
        try:
            text = self.trigger.resolved_schedule()
        except SettingMissing as error:  # the host names the schedule as written
            raise InvalidSchedule(self.trigger.schedule, str(error), function.name) from None
        self.schedule: Schedule = parse_schedule(text, function.name)
        self.mode = mode
        self.stats = stats
        self.clock: Clock = clock or SystemClock()
        # the host turns the monitor off for schedules that fire more often than once a minute
        self.monitor_turned_off = self.trigger.use_monitor and self.schedule.monitor_disabled(
            self.clock.now()
        )
        self.monitor = (
            ScheduleMonitor(function.name, host_counter, self.clock)
            if self.trigger.use_monitor and not self.monitor_turned_off
            else None
        )
        # The host's own blobs (listener leases, timer status) go through the host's counter.
        self._hosts = (
            blobsingleton.config.from_settings("AzureWebJobsStorage")
            .with_options(raw_request_hook=host_counter, retry_policy=HostRetry())
            .blob_service()
            .get_container_client(HOSTS_CONTAINER)
        )
        self._status: dict[str, str] | None = None
        self._stop = threading.Event()
        self._lease: Any = None
        self._thread = threading.Thread(
            target=self._main, name=f"timer-{function.name}", daemon=True
        )

    def start(self) -> None:
        log.info(
            "%s: timer schedule %r (%s mode, monitor %s)",
            self.function.name,
            self.trigger.resolved_schedule(),
            self.mode,
            "on"
            if self.monitor
            else "off (the schedule fires more than once a minute)"
            if self.monitor_turned_off
            else "off",
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def drain(self, timeout: float) -> bool:
        """Wait for a running invocation to finish, then give up the listener lease."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # main loops

    def _main(self) -> None:
        while not self._stop.is_set():
            try:
                if self.mode == "once":
                    self._run_with_listener_lease()
                else:
                    self._run_schedule(lambda: not self._stop.is_set())
            except Exception:
                log.exception(
                    "%s: timer listener error; restarting it in %.0f s",
                    self.function.name,
                    RESTART_DELAY,
                )
                self._stop.wait(RESTART_DELAY)

    def _run_with_listener_lease(self) -> None:
        from blobsingleton import BlobLease
        from blobsingleton.errors import LeaseError

        key = f"{blobsingleton.config.host_id()}/{self.function.name}.Listener"
        while not self._stop.is_set():
            lease = BlobLease(key, period=LISTENER_LEASE_PERIOD, container=self._hosts)
            try:
                lease.acquire(blocking=False)
            except LeaseError:
                pass
            except Exception as error:
                log.warning("%s: listener lease attempt failed: %r", self.function.name, error)
            if not lease.is_held:
                self.clock.wait(self._stop, LISTENER_RECOVERY_INTERVAL)
                continue
            self._lease = lease
            log.info(
                "%s: acquired listener lease %s: this instance fires the timer",
                self.function.name,
                key,
            )

            def holding(lease: BlobLease = lease) -> bool:
                return not self._stop.is_set() and lease.is_held

            self._run_schedule(holding)
            if self._stop.is_set():
                self._release(lease)
                return
            log.warning(
                "%s: listener lease lost: not firing until it is re-acquired", self.function.name
            )
            self._lease = None

    def _release(self, lease: Any) -> None:
        try:
            lease.release()
            log.info("%s: released listener lease", self.function.name)
        except Exception as error:
            log.warning("%s: releasing listener lease failed: %r", self.function.name, error)
        self._lease = None

    def _run_schedule(self, active: Callable[[], bool]) -> None:
        now = self.clock.now()
        status = self._read_status()
        stored_next = _parse(status.get("Next")) if status else None
        if stored_next is not None and stored_next < now:
            log.info(
                "%s: past due (stored Next %s): one catch-up run",
                self.function.name,
                _iso(stored_next),
            )
            self._fire(past_due=True)
        elif self.trigger.run_on_startup:
            self._fire(past_due=False, on_startup=True)
        elif self.monitor is not None and (status is None or stored_next is None):
            self._write_status(NEVER, self.schedule.next_after(now))
        next_time = self.schedule.next_after(self.clock.now())
        # The start-up decision (catch-up, run on start-up, or neither) is made: tests wait on it.
        log.info("%s: schedule running; next occurrence %s", self.function.name, _iso(next_time))
        while active():
            delay = (next_time - self.clock.now()).total_seconds()
            if delay > 0:
                self.clock.wait(self._stop, min(delay, 1.0))
                continue
            next_time = self._fire(past_due=False, occurrence=next_time)

    # one run

    def _read_status(self) -> dict[str, str] | None:
        if self.monitor is None:
            return None
        for attempt in range(3):
            try:
                self._status = self.monitor.read()
                return self._status
            except Exception as error:
                log.warning("%s: reading timer status failed: %r", self.function.name, error)
                self.clock.wait(self._stop, 0.5 * (attempt + 1))
        return None

    def _write_status(self, last: datetime, next_: datetime) -> None:
        if self.monitor is None:
            self._status = {
                "Last": _iso(last),
                "Next": _iso(next_),
                "LastUpdated": _iso(self.clock.now()),
            }
            return
        try:
            self._status = self.monitor.write(last, next_)
        except Exception as error:
            log.warning("%s: writing timer status failed: %r", self.function.name, error)

    def _fire(
        self, *, past_due: bool, occurrence: datetime | None = None, on_startup: bool = False
    ) -> datetime:
        """One invocation; returns the next occurrence, computed as the host computes it.

        The function sees the schedule status only when the monitor is on (the host passes
        none otherwise). The next occurrence follows from the time the firing started, or
        from the occurrence it stood for if the timer fired before it (early firing), so a
        firing is never followed by the same occurrence again."""
        name = self.function.name
        fired_at = self.clock.now()
        status = dict(self._status) if self.monitor is not None and self._status else None
        self.stats.started(name)
        ok = False
        try:
            request = TimerRequest(  # the worker's concrete func.TimerRequest
                past_due=past_due, schedule_status=status, schedule={"AdjustForDST": True}
            )
            invoke(
                self.function.user_function,
                {self.function.arg_name: request},
                function_name=name,
            )
            ok = True
        except Exception:
            log.exception("%s: timer invocation failed (no retry, like the host)", name)
        finally:
            self.stats.finished(name, ok)
        basis = fired_at
        if not past_due and not on_startup and occurrence is not None and occurrence > fired_at:
            basis = occurrence
        following = self.schedule.next_after(basis)
        self._write_status(basis, following)
        return following
