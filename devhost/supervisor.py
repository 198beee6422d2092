"""Start N app instances as spawned processes, collect their stats, stop them gracefully."""

from __future__ import annotations

import argparse
import contextlib
import logging
import multiprocessing as mp
import os
import queue
import secrets
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devhost import worker
from devhost.app_settings import (
    AppSettings,
    instance_settings,
    load_app_settings,
    with_host_id,
)

log = logging.getLogger("devhost.supervisor")

FUNCTION_KEY_SETTING = "DEVHOST_FUNCTION_KEY"
#: The host's master key: the only key accepted by authLevel admin functions.
ADMIN_KEY_SETTING = "DEVHOST_ADMIN_KEY"


class InstanceStartError(RuntimeError):
    """An instance failed to index the app or to start its listeners."""


def host_arguments(log_level_help: str) -> argparse.ArgumentParser:
    """The options that say which app to host and how loud (`--app`, `--app-dir`,
    `--log-level`), as a parent parser for any command that starts instances."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--app", default="function_app", help="app module (default function_app)")
    common.add_argument("--app-dir", default=".", help="folder of the app, host.json, settings")
    common.add_argument(
        "--log-level", default=os.environ.get("DEVHOST_LOG_LEVEL"), help=log_level_help
    )
    return common


def run_command(args: argparse.Namespace, default_log_level: str) -> int:
    """Run a parsed command that starts instances (`args.handler`), with the host's logging
    at `--log-level` (else `default_log_level`): 2 when an instance fails to start, 130 when
    interrupted, else what the handler returns."""
    if args.log_level is None:
        args.log_level = default_log_level
    worker.configure_logging("host", args.log_level)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return int(args.handler(args))
    except InstanceStartError as error:
        log.error("%s", error)
        return 2
    except KeyboardInterrupt:
        log.warning("interrupted")
        return 130


@dataclass
class HostOptions:
    """How to run the app: instance count, app module and per-run settings."""

    instances: int = 1
    app_module: str = "function_app"
    app_dir: str = "."
    timers: str = "every"
    http_port: int | None = 7071
    #: Run only these functions (None = all), like `func start --functions`.
    functions: list[str] | None = None
    #: Settings for every instance, on top of env + local.settings.json (None = unset).
    settings: dict[str, str | None] = field(default_factory=dict)
    #: Settings per instance; "{instance}" in a value becomes the instance number.
    instance_settings: dict[str, str] = field(default_factory=dict)
    drain_timeout: float = 30.0
    stats_interval: float = 0.5
    log_level: str = "INFO"
    #: The instances' log goes to this file instead of stderr (a progress display owns the
    #: terminal); None: stderr, as `devhost run` and `--verbose` do.
    log_file: str | None = None
    #: Respawn an instance that dies without being told to stop, as the platform replaces a
    #: crashed worker (scenarios that kill instances on purpose need it).
    restart: bool = False


@dataclass(frozen=True)
class Totals:
    """Stats summed over instances (the latest or final report of each)."""

    invocations: dict[str, int]
    successes: dict[str, int]
    failures: dict[str, int]
    poisoned: int
    in_flight: int
    host_storage_requests: int
    app_storage_requests: int
    #: Of the app's requests, those sent by the blob SDK.
    app_blob_requests: int = 0
    #: When the last invocation of any instance ended (epoch seconds; None before any did).
    last_finished_at: float | None = None

    @property
    def total_invocations(self) -> int:
        return sum(self.invocations.values())

    @property
    def finished(self) -> int:
        """Invocations that have ended, whatever their outcome."""
        return sum(self.successes.values()) + sum(self.failures.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "invocations": self.invocations,
            "successes": self.successes,
            "failures": self.failures,
            "poisoned": self.poisoned,
            "in_flight": self.in_flight,
            "host_storage_requests": self.host_storage_requests,
            "app_storage_requests": self.app_storage_requests,
            "app_blob_requests": self.app_blob_requests,
        }


def sum_reports(reports: list[dict[str, Any]]) -> Totals:
    invocations: Counter[str] = Counter()
    successes: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    poisoned = in_flight = host = app = blob = 0
    ended = [r["last_finished_at"] for r in reports if r.get("last_finished_at") is not None]
    for report in reports:
        invocations.update(report.get("invocations", {}))
        successes.update(report.get("successes", {}))
        failures.update(report.get("failures", {}))
        poisoned += sum(report.get("poisoned", {}).values())
        in_flight += report.get("in_flight", 0)
        host += report.get("host_storage_requests", 0)
        app += report.get("app_storage_requests", 0)
        blob += report.get("app_blob_requests", 0)
    return Totals(
        dict(invocations), dict(successes), dict(failures), poisoned, in_flight, host, app, blob,
        max(ended) if ended else None,
    )  # fmt: skip


class Supervisor:
    """Runs `options.instances` workers; use as a context manager or start()/stop()."""

    def __init__(self, options: HostOptions, app_settings: AppSettings | None = None) -> None:
        self.options = options
        self.app_settings = app_settings or load_app_settings(options.app_dir)
        base: dict[str, str | None] = {**self.app_settings.values, **options.settings}
        key = base.get(FUNCTION_KEY_SETTING)
        self.generated_key = not key
        self.function_key = key or secrets.token_urlsafe(24)
        base[FUNCTION_KEY_SETTING] = self.function_key
        admin_key = base.get(ADMIN_KEY_SETTING)
        self.generated_admin_key = not admin_key
        self.admin_key = admin_key or secrets.token_urlsafe(24)
        base[ADMIN_KEY_SETTING] = self.admin_key
        self._base_settings = with_host_id(base, options.app_dir)
        self._ctx = mp.get_context("spawn")
        self._reports: Any = self._ctx.Queue()
        self._processes: dict[int, Any] = {}
        self._latest: dict[int, dict[str, Any]] = {}
        self._ready: dict[int, dict[str, Any]] = {}
        self._errors: dict[int, str] = {}
        self._lock = threading.Lock()
        self._collecting = threading.Event()
        self._stopped = False
        self._collector = threading.Thread(target=self._collect, name="stats", daemon=True)
        self._configs: dict[int, worker.WorkerConfig] = {}
        self._restarts: Counter[int] = Counter()
        self._retired: list[dict[str, Any]] = []  # last reports of instances that died
        self._watchdog = threading.Thread(target=self._respawn_dead, name="watchdog", daemon=True)
        self._told_to_stop: set[int] = set()  # instances stopped on purpose: never respawned

    # settings

    def settings_for(self, instance: int) -> dict[str, str | None]:
        return instance_settings(self._base_settings, self.options.instance_settings, instance)

    # lifecycle

    def __enter__(self) -> Supervisor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, ready_timeout: float = 90.0) -> None:
        """Spawn the workers and wait until each has indexed the app and started listening."""
        for note in self.app_settings.notes:
            log.info("%s", note)
        self._collecting.set()
        self._collector.start()
        for i in range(self.options.instances):
            self._configs[i] = worker.WorkerConfig(
                instance=i,
                app_module=self.options.app_module,
                app_dir=str(Path(self.options.app_dir).resolve()),
                settings=self.settings_for(i),
                timers=self.options.timers,
                http_port=self.options.http_port,
                functions=tuple(self.options.functions) if self.options.functions else None,
                function_key=self.function_key,
                admin_key=self.admin_key,
                drain_timeout=self.options.drain_timeout,
                stats_interval=self.options.stats_interval,
                log_level=self.options.log_level,
                log_file=self.options.log_file,
            )
            self._spawn(i)
        try:
            self._wait_ready(ready_timeout)
        except BaseException:
            self.stop()
            raise
        self._announce()
        if self.options.restart:
            self._watchdog.start()

    def _spawn(self, i: int) -> None:
        process = self._ctx.Process(
            target=worker.main, args=(self._configs[i], self._reports), name=f"devhost-{i}"
        )
        process.start()
        self._processes[i] = process

    def _respawn_dead(self) -> None:
        """Restart instances that died while running; their last stats are kept."""
        while not self._stopped:
            for i, process in list(self._processes.items()):
                if process.is_alive() or self._stopped or i in self._told_to_stop:
                    continue
                with self._lock:
                    last = self._latest.pop(i, None)
                    if last is not None:
                        self._retired.append({**last, "in_flight": 0})
                    self._restarts[i] += 1
                log.warning("instance %d exited (code %s): restarting it", i, process.exitcode)
                self._spawn(i)
            time.sleep(0.1)

    def restarts(self) -> dict[int, int]:
        """How many times each instance was restarted after dying."""
        with self._lock:
            return dict(self._restarts)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                ready, errors = len(self._ready), dict(self._errors)
            if errors:
                raise InstanceStartError("; ".join(f"instance {i}: {e}" for i, e in errors.items()))
            if ready == len(self._processes):
                return
            dead = [
                i for i, p in self._processes.items() if not p.is_alive() and i not in self._ready
            ]
            if dead:
                time.sleep(0.5)  # let the collector pick up the error report
                with self._lock:
                    errors = dict(self._errors)
                detail = "; ".join(f"instance {i}: {e}" for i, e in errors.items())
                codes = {i: self._processes[i].exitcode for i in dead}
                raise InstanceStartError(f"instances exited during start-up {codes}: {detail}")
            if time.monotonic() > deadline:
                raise InstanceStartError(
                    f"only {ready} of {len(self._processes)} instances ready after {timeout:.0f}s"
                )
            time.sleep(0.05)

    def started_instances(self) -> dict[int, dict[str, Any]]:
        """What each instance reported when it became ready: its functions and their errors."""
        with self._lock:
            return {i: dict(info) for i, info in self._ready.items()}

    def _announce(self) -> None:
        with self._lock:
            ready = dict(self._ready)
        first = ready.get(0, {})
        kinds = first.get("functions", {})
        log.info(
            "%d instance(s) running %s: %s",
            len(ready),
            self.options.app_module,
            ", ".join(f"{n} ({k})" for n, k in kinds.items()) or "no functions",
        )
        for i, info in sorted(ready.items()):
            for name, error in info.get("errors", {}).items():
                log.error("instance %d: function %s is in error: %s", i, name, error)
        serving_http = self.options.http_port is not None and "HttpTrigger" in kinds.values()
        if serving_http and self.generated_key:
            log.info(
                "function key for authLevel function (set %s to choose one): %s",
                FUNCTION_KEY_SETTING,
                self.function_key,
            )
        if serving_http and self.generated_admin_key:
            log.info(
                "admin (master) key for authLevel admin and function (set %s to choose one): %s",
                ADMIN_KEY_SETTING,
                self.admin_key,
            )

    def stop_instance(self, i: int, timeout: float | None = None) -> int | None:
        """Stop one instance the way the host stops a worker (drain, then kill); its exit code.

        The instance gets devhost's SIGTERM (a request to drain, never seen by the app's own
        handlers), finishes its in-flight invocations and SIGKILLs itself; after `timeout` it
        is killed from here, as the host disposes a worker that outlives its drain."""
        process = self._processes[i]
        self._told_to_stop.add(i)
        timeout = self.options.drain_timeout + 15 if timeout is None else timeout
        process.terminate()
        process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join(5)
        return int(process.exitcode) if process.exitcode is not None else None

    def stop(self, timeout: float | None = None) -> list[dict[str, Any]]:
        """SIGTERM every worker, wait for them to drain and report; kill stragglers."""
        if self._stopped:
            return self.reports()
        self._stopped = True
        if self._watchdog.is_alive():
            self._watchdog.join(5)
        timeout = self.options.drain_timeout + 15 if timeout is None else timeout
        for process in self._processes.values():
            if process.is_alive():
                process.terminate()
        deadline = time.monotonic() + timeout
        for i, process in self._processes.items():
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                log.warning("instance %d did not stop in %.0fs: killing it", i, timeout)
                process.kill()
                process.join(5)
        if self._collecting.is_set():
            self._collecting.clear()
            if self._collector.is_alive():
                self._collector.join(5)
        self._drain_reports()
        with contextlib.suppress(Exception):
            self._reports.close()
        return self.reports()

    # stats

    def _collect(self) -> None:
        while self._collecting.is_set():
            with contextlib.suppress(queue.Empty):
                self._record(self._reports.get(timeout=0.1))

    def _drain_reports(self) -> None:
        while True:
            try:
                self._record(self._reports.get(timeout=0.2))
            except (queue.Empty, OSError, ValueError, EOFError):
                return

    def _record(self, report: dict[str, Any]) -> None:
        i = report.get("instance", -1)
        kind = report.get("kind")
        with self._lock:
            if kind == "ready":
                self._ready[i] = report
            elif kind == "error":
                self._errors[i] = report.get("error", "unknown error")
            elif kind == "stats" and not self._latest.get(i, {}).get("final"):
                self._latest[i] = report

    def reports(self) -> list[dict[str, Any]]:
        with self._lock:
            return [self._latest[i] for i in sorted(self._latest)] + list(self._retired)

    def totals(self) -> Totals:
        return sum_reports(self.reports())

    def pid(self, i: int) -> int | None:
        """The process id of instance `i`'s current worker (a respawn gets a new one)."""
        process = self._processes.get(i)
        return None if process is None else process.pid

    def alive(self) -> list[int]:
        return [i for i, p in self._processes.items() if p.is_alive()]

    def exit_codes(self) -> dict[int, int | None]:
        return {i: p.exitcode for i, p in self._processes.items()}

    def wait_quiet(self, quiet: float = 1.0, timeout: float = 60.0) -> bool:
        """True once nothing is in flight and no invocation started for `quiet` seconds."""
        deadline = time.monotonic() + timeout
        last_count, since = -1, time.monotonic()
        while time.monotonic() < deadline:
            totals = self.totals()
            if totals.total_invocations != last_count or totals.in_flight:
                last_count, since = totals.total_invocations, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return True
            time.sleep(min(0.1, self.options.stats_interval))
        return False
