"""One instance of the app: a spawned process that runs its queue, timer and HTTP triggers.

Settings become os.environ before the app module is imported, exactly like the host sets app
settings as environment variables before the Python worker loads function_app.py.
On SIGTERM/SIGINT the worker stops fetching, lets in-flight invocations finish (bounded),
then chains to the signal handler that was installed before its own (e.g. one that releases
leases), reports its final stats to the supervisor and exits.
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


def configure_logging(prefix: str, level: str = "INFO", log_file: str | None = None) -> None:
    """One line per event on stderr (or appended to `log_file`), prefixed with the instance."""
    handler: logging.Handler = (
        logging.FileHandler(log_file, encoding="utf-8")
        if log_file
        else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(
        logging.Formatter(
            f"[{prefix}] %(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s",
            datefmt="%H:%M:%S",
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("azure", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # "Connection pool is full" under concurrency: the SDK's pool of 10 per client; not actionable.
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)


def apply_settings(settings: dict[str, str | None]) -> None:
    for name, value in settings.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


class _Shutdown:
    """Turns SIGTERM/SIGINT into a stop event and remembers the handlers it replaced."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signum: int | None = None
        self.previous: dict[int, Any] = {}

    def install(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(signum)
            if previous is not self._handle:
                self.previous[signum] = previous
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
        self.event.set()

    def chain(self) -> None:
        """Run the handler installed before ours (lease release), after in-flight work ended."""
        if self.signum is None:
            return
        previous = self.previous.get(self.signum)
        if callable(previous) and previous is not signal.default_int_handler:
            with contextlib.suppress(SystemExit, KeyboardInterrupt):
                previous(self.signum, None)


def _install_lease_shutdown(log: logging.Logger) -> None:
    """Let the lease library release its leases on SIGTERM too; it is optional for the host."""
    try:
        import blobsingleton
    except ImportError:
        return
    try:
        blobsingleton.install_signal_handlers()
    except Exception as error:
        log.warning("blobsingleton.install_signal_handlers failed: %r", error)


def main(config: WorkerConfig, reports: Any) -> None:
    """Process entry point (multiprocessing target)."""
    shutdown = _Shutdown()
    shutdown.install()  # early: a SIGTERM during start-up still stops us gracefully
    apply_settings(config.settings)
    request_counting.install()  # the host counts the app's storage requests, the app does not
    os.environ["WEBSITE_INSTANCE_ID"] = f"devhost-{config.instance}"
    configure_logging(str(config.instance), config.log_level, config.log_file)
    log = logging.getLogger("devhost.worker")
    parent = os.getppid()

    try:
        # Imported after the settings are applied: the app reads them at import.
        from devhost.instance import Instance

        instance = Instance.load(config)
    except Exception as error:
        log.exception("indexing the app failed")
        reports.put({"kind": "error", "instance": config.instance, "error": str(error)})
        _flush(reports)
        sys.exit(EXIT_INDEXING_FAILED)
    _install_lease_shutdown(log)
    shutdown.install()  # on top of anything the app or the lease library installed
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
    _flush(reports)  # before chaining: a chained handler may end the process
    shutdown.chain()
    if not drained:
        os._exit(0)  # stuck invocation threads must not keep the process alive


def _flush(reports: Any) -> None:
    with contextlib.suppress(Exception):
        reports.close()
        reports.join_thread()
