"""One instance of the app: a spawned process that runs its queue, timer and HTTP triggers.

Settings become os.environ before the app module is imported, exactly like the host sets app
settings as environment variables before the Python worker loads function_app.py.

Stopping follows the Functions host, which stops a Python worker by draining (listeners
stopped, in-flight invocations finish, bounded) and then disposing the worker process with
Process.Kill: the Python worker does not advertise HandlesWorkerTerminateMessage, so no
WorkerTerminate is sent and no signal reaches the app's handlers. Here SIGTERM/SIGINT from the
supervisor is only devhost's request to shut down (it replaces whatever the app installed);
after the drain the process SIGKILLs itself, so neither the app's signal handlers nor atexit
run, as on Azure.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from devhost import request_counting
from devhost.app_settings import instance_id

EXIT_INDEXING_FAILED = 3
EXIT_START_FAILED = 4


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a worker needs; picklable for the spawn start method."""

    instance: int
    app_module: str = "function_app"
    app_dir: str = "."
    settings: dict[str, str | None] = field(default_factory=dict)  # None = unset it
    timers: str = "every"
    http_port: int | None = 7071  # base port; instance i listens on http_port + i
    functions: tuple[str, ...] | None = None  # run only these (like `func start --functions`)
    function_key: str = ""
    admin_key: str = ""
    drain_timeout: float = 30.0
    stats_interval: float = 0.5
    log_level: str = "INFO"
    log_file: str | None = None  # append the log here instead of stderr


def configure_logging(
    prefix: str,
    level: str = "INFO",
    log_levels: dict[str, str] | None = None,
    log_file: str | None = None,
) -> None:
    """One line per record on stderr (or appended to `log_file`), prefixed with the instance
    number and the invocation id the worker would attach to it (empty when it could not).

    The root logger is set to INFO, as the worker sets it: whatever the app leaves at INFO
    (azure-core's HTTP logging policy included) reaches the host. Records then pass the
    host.json `logging.logLevel` rules (`log_levels`) and devhost's own `level`.
    """
    from devhost.invocation import InvocationIdFilter
    from devhost.log_levels import HostLogLevelFilter

    handler: logging.Handler = (
        logging.FileHandler(log_file, encoding="utf-8")
        if log_file
        else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(
        logging.Formatter(
            f"[{prefix}] %(asctime)s.%(msecs)03d %(levelname)s [%(invocation_id)s] "
            "%(name)s: %(message)s",
            datefmt="%H:%M:%S",
        )
    )
    handler.addFilter(InvocationIdFilter())
    handler.addFilter(_host_side_sdk_records)
    handler.addFilter(HostLogLevelFilter(log_levels or {}))
    handler.setLevel(level)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)  # the worker's setting (DEBUG with PYTHON_ENABLE_DEBUG_LOGGING)
    if os.environ.get("PYTHON_ENABLE_DEBUG_LOGGING", "").lower() in ("1", "true"):
        root.setLevel(logging.DEBUG)
    # devhost's own plumbing, not the app's: "Connection pool is full" is not actionable.
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)


def _host_side_sdk_records(record: logging.LogRecord) -> bool:
    """Drops the storage SDK's INFO records that no invocation made: devhost's own listeners
    make them, and on Azure those requests are the .NET host's, not the worker's."""
    untied = not getattr(record, "invocation_id", "")
    return not (untied and record.name.startswith("azure.") and record.levelno < logging.WARNING)


def apply_settings(settings: dict[str, str | None]) -> None:
    for name, value in settings.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


class _Shutdown:
    """Turns the supervisor's SIGTERM/SIGINT into a stop event (never chained to the app's)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signum: int | None = None

    def install(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
        self.event.set()


def dispose_process() -> None:
    """The host's Process.Kill: no signal handler, no atexit, no finally blocks run."""
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def main(config: WorkerConfig, reports: Any) -> None:
    """Process entry point (multiprocessing target)."""
    shutdown = _Shutdown()
    shutdown.install()  # early: a SIGTERM during start-up still stops us gracefully
    apply_settings(config.settings)
    request_counting.install()  # the host counts the app's storage requests, the app does not
    os.environ["WEBSITE_INSTANCE_ID"] = instance_id(config.instance)
    log_levels = _host_log_levels(config)
    configure_logging(str(config.instance), config.log_level, log_levels, config.log_file)
    log = logging.getLogger("devhost.worker")
    parent = os.getppid()

    from devhost.invocation import configure_worker_telemetry

    configure_worker_telemetry()  # as the worker does, before it loads the app
    try:
        # Imported after the settings are applied: the app reads them at import.
        from devhost.instance import Instance

        instance = Instance.load(config)
    except Exception as error:
        log.exception("indexing the app failed")
        reports.put({"kind": "error", "instance": config.instance, "error": str(error)})
        _flush(reports)
        sys.exit(EXIT_INDEXING_FAILED)
    shutdown.install()  # on top of anything the app installed: the host never signals it
    try:
        instance.start()
    except Exception as error:  # e.g. the HTTP port is taken
        log.exception("instance failed to start")
        reports.put({"kind": "error", "instance": config.instance, "error": repr(error)})
        _flush(reports)
        os._exit(EXIT_START_FAILED)
    reports.put(
        {"kind": "ready", "instance": config.instance, "pid": os.getpid(), **instance.describe()}
    )
    while not shutdown.event.wait(config.stats_interval):
        reports.put(instance.report(final=False))
        if os.getppid() != parent:
            log.warning("supervisor is gone: stopping")
            break
    name = signal.Signals(shutdown.signum).name if shutdown.signum else "parent exit"
    log.info(
        "%s: stopping (no new work; waiting up to %.0fs for %d in-flight invocation(s))",
        name,
        config.drain_timeout,
        instance.stats.in_flight,
    )
    started = time.monotonic()
    drained = instance.stop(config.drain_timeout)
    log.info(
        "stopped in %.1fs%s",
        time.monotonic() - started,
        "" if drained else " (some invocations did not finish)",
    )
    reports.put(instance.report(final=True))
    _flush(reports)
    dispose_process()


def _host_log_levels(config: WorkerConfig) -> dict[str, str]:
    """host.json `logging.logLevel`, or none when host.json cannot be read (reported later)."""
    from devhost.host_config import HostConfigError, load_host_config

    try:
        return load_host_config(config.app_dir, os.environ).log_levels
    except HostConfigError:
        return {}


def _flush(reports: Any) -> None:
    with contextlib.suppress(Exception):
        reports.close()
        reports.join_thread()
