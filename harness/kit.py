"""The harness's public kit: what every scenario, the demo, the chaos run and the benchmarks
need around devhost: run-specific names, queues and containers, parallel enqueue, running
instances, waiting for drain, the storage a run uses.

A scenario module in `harness/scenarios/` defines NAME, HELP, `add_arguments(parser)` and
`main(args) -> int`; `python -m harness scenario NAME` finds it without any list to update,
and adds the options all scenarios share (`add_run_arguments`: --json, --keep, --azurite).
A connection is the name of an app setting, or a `StorageAccount`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import blobsingleton.config
from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.storage.blob import LinearRetry
from blobsingleton import StorageAccount
from blobsingleton.config import RETRY, from_settings

from devhost.app_settings import AppSettings, load_app_settings
from devhost.request_counting import RequestCounter, request_counter
from devhost.supervisor import HostOptions, Supervisor, Totals
from devhost.worker import apply_settings
from harness import services
from harness.fault_proxy import FaultProxy, FaultRates, parse_rates
from harness.injectors import (
    fault_proxies,
    injected_errors,
    proxied_connection_string,
    proxy_counts,
)
from shared.storage import encoded_queue_client

log = logging.getLogger("harness.scenario")

#: The scenario's own storage traffic (setup, enqueue, counting) is kept out of the stats.
scenario_counter = RequestCounter()


#: The harness's own storage requests (setup, feeding, watching queue depths, reading the
#: outcomes) are retried as the app's clients retry theirs, `blobsingleton.config.RETRY`
#: (about a second apart, jittered), only more times: the harness watches a run through the
#: faults it injects and must outlast them. With 10 % ServerBusy and 10 % lost answers, the
#: app's 3 retries leave one call in 625 failing (0.2^4), and a run's watch makes hundreds
#: (the app has the host's redelivery behind its own); 10 leave one in 50 million.
HARNESS_RETRIES = 10


def harness_retry() -> LinearRetry:
    """The retry policy of the harness's blob and queue clients (`HARNESS_RETRIES`)."""
    retries = {f"retry_{kind}": HARNESS_RETRIES for kind in ("total", "connect", "read", "status")}
    options: dict[str, Any] = {**RETRY, **retries}  # each kind's own count is 3 by default
    return LinearRetry(**options)


def harness_table_options() -> dict[str, Any]:
    """The same for a Tables client (azure-core's policy: fixed waits of RETRY's backoff)."""
    return {"retry_total": HARNESS_RETRIES, "retry_mode": "fixed",
            "retry_backoff_factor": RETRY["backoff"]}  # fmt: skip


def patient_clients() -> None:
    """Every storage client this process builds from settings from now on (the app's and the
    library's readers the harness uses: the outbox, the job store, `blobsingleton.ops`)
    retries as `harness_retry`, and is counted as `devhost.request_counting.install` counts."""
    blobsingleton.config.set_client_options(
        raw_request_hook=request_counter, retry_policy=harness_retry()
    )


def new_run_id() -> str:
    """A short id that makes queue and container names unique to one run."""
    return uuid.uuid4().hex[:8]


def use_app_settings(app_dir: str = ".") -> AppSettings:
    """Load env + local settings into this process too, so scenario clients use them."""
    settings = load_app_settings(app_dir)
    for note in settings.notes:
        log.info("%s", note)
    apply_settings(dict(settings.values))
    patient_clients()
    return settings


def functions_bound_to(
    settings: str | Iterable[str], app_module: str, app_dir: str = "."
) -> list[str]:
    """The app's functions whose trigger names `%setting%` for any of `settings`, so a scenario
    runs only the functions it measures. The app is indexed here as a fresh worker indexes it:
    the azure-functions library refuses a second `get_functions()` on one app object, and this
    process (a test run, a benchmark) may have indexed it before."""
    from devhost.indexing import QueueTrigger, TimerTrigger, import_app, index_app

    wanted = [settings] if isinstance(settings, str) else list(settings)
    app = import_app(app_module, app_dir)
    app.functions_bindings = None
    try:
        functions = index_app(app)
    finally:
        app.functions_bindings = None  # and left as found by whoever indexes it next
    names = []
    for function in functions:
        trigger = function.trigger
        text = (
            trigger.queue_name
            if isinstance(trigger, QueueTrigger)
            else trigger.schedule
            if isinstance(trigger, TimerTrigger)
            else ""
        )
        if any(f"%{setting}%" in text for setting in wanted):
            names.append(function.name)
    if not names:
        raise LookupError(f"{app_module} has no function triggered through {wanted}")
    return sorted(names)


#: A connection: the name of the app setting that holds it, or the account itself.
Connection = str | StorageAccount


def harness_account(connection: Connection) -> StorageAccount:
    """The account for the harness's own requests: counted as the scenario's, not the
    app's, and retried as `harness_retry`."""
    account = from_settings(connection) if isinstance(connection, str) else connection
    return account.with_options(raw_request_hook=scenario_counter, retry_policy=harness_retry())


def queue_client(name: str, connection: Connection = "AzureWebJobsStorage") -> Any:
    """A queue client with the host's encoding, counted as the scenario's, not the app's."""
    service = harness_account(connection).queue_service()
    return encoded_queue_client(service, name)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every scenario's `main` has: read by `scenario_storage` and `print_report`."""
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--keep", action="store_true", help="keep the run's storage to inspect")
    parser.add_argument(
        "--azurite",
        action="store_true",
        help="start a private Azurite for this run instead of using AzureWebJobsStorage "
        "(also done when it is UseDevelopmentStorage=true and nothing listens on 10000)",
    )


def add_server_error_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a scenario that can run its instances through `--server-errors`
    proxies (read by `scenario_storage`; the scenario gives its instances
    `instance_storage()` and reports `server_error_report()`)."""
    parser.add_argument(
        "--server-errors", type=_server_error_rates, default=None, metavar="503=P,500=P",
        help="answer the instances' storage requests as Azure does under load, through a "
        "seeded proxy on a private Azurite: 503 ServerBusy (not forwarded), 500 "
        "OperationTimedOut / InternalError (after forwarding); the harness's own are spared",
    )  # fmt: skip
    parser.add_argument(
        "--spare", action="append", default=[], metavar="PREFIX",
        help="with --server-errors: containers, queues or tables named PREFIX... never get "
        "one (e.g. outbox: the recording stand-in for the email provider); repeatable",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=1, help="the server errors' seed")
    parser.add_argument(
        "--faults-on-harness", action="store_true",
        help="with --server-errors: the harness's own requests (setup, feeding, watching, "
        "reading the outcome) go through the proxies too, as on an account under load",
    )  # fmt: skip


def _server_error_rates(text: str) -> FaultRates:
    try:
        return parse_rates(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


@dataclass
class _Proxied:
    """The fault proxies a scenario runs its instances through (`scenario_storage`)."""

    proxies: dict[str, FaultProxy] = field(default_factory=dict)


_proxied = _Proxied()


#: With server errors, the instances hold a received message invisible this long (the host's
#: 10 minutes otherwise): a Get Messages whose answer the proxy replaced leaves its messages
#: invisible for that long, as on Azure, and a run waits for them to come back.
PROXIED_INVOCATION_VISIBILITY = "20"


def active_fault_proxies() -> dict[str, FaultProxy]:
    """The fault proxies the scenario's instances go through, by service ({} without)."""
    return dict(_proxied.proxies)


def instance_storage() -> dict[str, str]:
    """Settings that point the instances at the scenario's fault proxies ({} without them)."""
    if not _proxied.proxies:
        return {}
    return {
        "AzureWebJobsStorage": proxied_connection_string(_proxied.proxies),
        "DEVHOST_INVOCATION_VISIBILITY": PROXIED_INVOCATION_VISIBILITY,
    }


def server_error_report() -> dict[str, Any]:
    """What the proxies injected ({} without them): counts per service, and each error."""
    if not _proxied.proxies:
        return {}
    return {
        "by_service": proxy_counts(_proxied.proxies),
        "injected": [e.as_dict() for e in injected_errors(_proxied.proxies)],
    }


@contextlib.contextmanager
def scenario_storage(
    private_azurite: bool,
    app_dir: str = ".",
    *,
    server_errors: FaultRates | None = None,
    spare: tuple[str, ...] = (),
    seed: int = 1,
    faults_on_harness: bool = False,
) -> Iterator[None]:
    """Run against a private Azurite when asked, or when the app's storage is the local
    emulator (`UseDevelopmentStorage=true`) and nothing listens on its port; else against the
    account AzureWebJobsStorage names. `server_errors`: a private Azurite, with seeded fault
    proxies between it and the instances (`instance_storage`); the harness's own requests
    (setup, feeding, counting) go to Azurite directly, or with `faults_on_harness` through
    the proxies too (they retry as `harness_retry`)."""
    if not (private_azurite or server_errors or development_storage_down(app_dir)):
        yield
        return
    log.info("starting a private Azurite for this run")
    with services.azurite() as azurite:
        os.environ["AzureWebJobsStorage"] = azurite.connection_string
        if server_errors is None:
            yield
            return
        with fault_proxies(azurite, seed, server_errors, spare) as proxies:
            _proxied.proxies = proxies
            if faults_on_harness:
                os.environ["AzureWebJobsStorage"] = proxied_connection_string(proxies)
            try:
                yield
            finally:
                _proxied.proxies = {}


def development_storage_down(app_dir: str) -> bool:
    value = load_app_settings(app_dir).values.get("AzureWebJobsStorage", "") or ""
    if value.strip().rstrip(";").lower() != "usedevelopmentstorage=true":
        return False
    try:
        socket.create_connection(("127.0.0.1", 10000), 0.5).close()
    except OSError:
        return True
    return False


def print_report(report: Any, as_json: bool, kept: str) -> int:
    """One JSON object (or the summary) on stdout; the exit code says whether the run was ok."""
    if as_json:
        print(json.dumps({**asdict(report), "ok": report.ok}), flush=True)
    else:
        print(report.summary(), flush=True)
    if not report.ok:
        print(f"run {report.run_id} failed; {kept}", file=sys.stderr)
    return 0 if report.ok else 1


def reset_queues(names: Iterable[str], connection: Connection = "AzureWebJobsStorage") -> None:
    """Create each queue, or empty it if it exists."""
    for name in names:
        client = queue_client(name, connection)
        try:
            client.create_queue()
        except ResourceExistsError:
            client.clear_messages()


def delete_queues(names: Iterable[str], connection: Connection = "AzureWebJobsStorage") -> None:
    for name in names:
        with contextlib.suppress(ResourceNotFoundError):
            queue_client(name, connection).delete_queue()


def create_containers(names: Iterable[str], connection: Connection = "AzureWebJobsStorage") -> None:
    service = harness_account(connection).blob_service()
    for name in names:
        with contextlib.suppress(ResourceExistsError):
            service.create_container(name)


def delete_containers(names: Iterable[str], connection: Connection = "AzureWebJobsStorage") -> None:
    service = harness_account(connection).blob_service()
    for name in names:
        with contextlib.suppress(ResourceNotFoundError):
            service.delete_container(name)


def enqueue_all(
    messages: Iterable[tuple[str, bytes]],
    connection: Connection = "AzureWebJobsStorage",
    threads: int = 32,
) -> int:
    """Send (queue, body) pairs in parallel threads; returns how many were sent."""
    local = threading.local()  # a client (and connection pool) per thread

    def send(item: tuple[str, bytes]) -> None:
        name, body = item
        clients = local.__dict__.setdefault("clients", {})
        if name not in clients:
            clients[name] = queue_client(name, connection)
        clients[name].send_message(body)

    items = list(messages)
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="enqueue") as pool:
        for _ in pool.map(send, items):
            pass
    return len(items)


def queue_depths(
    names: Iterable[str], connection: Connection = "AzureWebJobsStorage"
) -> dict[str, int]:
    """Approximate message count per queue, invisible (in-flight, delayed) messages included;
    0 for a queue that does not exist."""
    depths: dict[str, int] = {}
    for name in names:
        try:
            props = queue_client(name, connection).get_queue_properties()
            depths[name] = int(props.approximate_message_count or 0)
        except ResourceNotFoundError:
            depths[name] = 0
    return depths


def wait_until_drained(
    supervisor: Supervisor,
    queues: list[str],
    *,
    connection: Connection = "AzureWebJobsStorage",
    quiet: float = 2.0,
    timeout: float = 600.0,
    poll: float = 0.5,
    progress_every: float = 5.0,
) -> bool:
    """True once the queues are empty and no invocation ran for `quiet` seconds.

    Queue depths are only read while nothing is in flight (or for a progress line), so the
    waiting adds almost no load to the storage account under test.
    """
    deadline = time.monotonic() + timeout
    last_depth_at = 0.0
    depth = -1
    while time.monotonic() < deadline:
        totals = supervisor.totals()
        due = time.monotonic() - last_depth_at >= progress_every
        if totals.in_flight == 0 or due:
            depth = sum(queue_depths(queues, connection).values())
        if due:
            last_depth_at = time.monotonic()
            log.info(
                "%d message(s) queued, %d invocation(s) so far, %d in flight",
                depth,
                totals.total_invocations,
                totals.in_flight,
            )
        if not supervisor.alive():
            log.error("every instance has exited: %s", supervisor.exit_codes())
            return False
        if depth == 0 and totals.in_flight == 0:
            remaining = max(0.0, deadline - time.monotonic())
            quiet_now = supervisor.wait_quiet(quiet, timeout=min(remaining, quiet * 4))
            if quiet_now and sum(queue_depths(queues, connection).values()) == 0:
                return True
        time.sleep(poll)
    return False


@dataclass
class RunResult:
    """What running the instances produced: totals, the time from the start until the last
    invocation ended (once drained), whether the queues drained."""

    totals: Totals
    elapsed_s: float
    drained: bool
    reports: list[dict[str, Any]] = field(default_factory=list)


@contextlib.contextmanager
def running(options: HostOptions, app_settings: AppSettings | None = None) -> Iterator[Supervisor]:
    """Instances running for the block; stopped (gracefully) when it ends."""
    supervisor = Supervisor(options, app_settings)
    supervisor.start()
    try:
        yield supervisor
    finally:
        supervisor.stop()


def feed_with_backlog(
    rounds: Iterable[list[tuple[str, bytes]]],
    supervisor: Supervisor,
    *,
    backlog: int,
    timeout: float = 600.0,
    connection: Connection = "AzureWebJobsStorage",
    threads: int = 32,
) -> int:
    """Send each round of (queue, body) messages once fewer than `backlog` rounds are waiting.

    Azurite's queue operations scan every message it holds, so a backlog of thousands makes
    each receive and delete tens of milliseconds slower; a bounded backlog keeps the run fast
    and still lets every instance see every message. Waiting = sent minus invocations ended.
    """
    local = threading.local()

    def send(item: tuple[str, bytes]) -> None:
        clients = local.__dict__.setdefault("clients", {})
        if item[0] not in clients:
            clients[item[0]] = queue_client(item[0], connection)
        clients[item[0]].send_message(item[1])

    sent = 0
    deadline = time.monotonic() + timeout
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="feed") as pool:
        for messages in rounds:
            limit = backlog * max(len(messages), 1)
            while sent - supervisor.totals().finished > limit:
                if not supervisor.alive():
                    raise RuntimeError("every instance has exited while feeding")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"instances fell behind: {sent} sent in {timeout:.0f} s")
                time.sleep(0.05)
            for _ in pool.map(send, messages):
                pass
            sent += len(messages)
    return sent


def run_until_drained(
    options: HostOptions,
    queues: list[str],
    *,
    app_settings: AppSettings | None = None,
    timeout: float = 600.0,
    quiet: float = 2.0,
    while_running: Callable[[Supervisor], object] | None = None,
    watch: Callable[[Supervisor], object] | None = None,
) -> RunResult:
    """Start the instances, run `while_running` (e.g. feed more messages), wait for the queues
    to drain, stop the instances and collect their stats. `watch` is told the supervisor as
    soon as the instances run (a progress display follows it)."""
    with running(options, app_settings) as supervisor:
        started, started_at = time.monotonic(), time.time()
        if watch is not None:
            watch(supervisor)
        if while_running is not None:
            while_running(supervisor)
        remaining = max(1.0, timeout - (time.monotonic() - started))
        drained = wait_until_drained(supervisor, queues, timeout=remaining, quiet=quiet)
        elapsed = time.monotonic() - started - (quiet if drained else 0.0)
        ended_at = supervisor.totals().last_finished_at
        if drained and ended_at is not None:
            # when the last invocation ended, not when the polling noticed (0.5 s steps)
            elapsed = ended_at - started_at
    return RunResult(supervisor.totals(), max(elapsed, 0.001), drained, supervisor.reports())
