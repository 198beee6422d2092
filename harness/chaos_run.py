"""`python -m harness chaos`: the three flows at once on a private Azurite, under faults.

Notifications (every event on every instance's queue), nightly imports (a repeating timer, one
account's files arriving after another) and batch jobs (submitted one after another, called
back on a local receiver) run in one set of instances. Meanwhile the seeded schedule of
harness/chaos.py kills instances, pauses an import lease holder past its lease and restarts
Azurite with its data; seeded proxies (harness/fault_proxy.py) between the instances and
Azurite reset, stall and slow connections. Faults stop at 75 % of the run; the run then
settles until the queues drain, and the invariants are checked from the stores and the
recording stand-ins (outbox, callback receiver), never from the app's counters.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any
from urllib.parse import unquote

from azure.core.exceptions import ResourceNotFoundError
from blobsingleton import ops
from blobsingleton.config import from_settings

from devhost.supervisor import HostOptions, Supervisor
from devhost.worker import apply_settings
from harness import kit as _common
from harness import services
from harness.callbacks import CallbackReceiver
from harness.chaos import (
    PAUSE_SECONDS,
    AccountImport,
    ExecutedFault,
    Invariant,
    ScheduledFault,
    SentEmail,
    check_callbacks,
    check_emails,
    check_imports,
    check_poison,
    count_stale_writes,
    plan_faults,
)
from harness.fault_proxy import FaultProxy, FaultRates
from harness.feeding import job_request
from harness.scenarios import imports, notifications
from harness.scenarios.batch import JobRun

log = logging.getLogger("devhost.chaos")

#: Network faults per new connection from an instance to Azurite. Stalls outlast the storage
#: clients' retries of one request only when several hit in a row, so the flows slow down and
#: retry but are not starved.
RATES = FaultRates(reset=0.05, stall=0.03, latency=0.1, stall_seconds=30.0, latency_seconds=0.2)
SERVICES = ("blob", "queue", "table")
ROWS_PER_ACCOUNT = 2500
UNITS_PER_JOB = 40
#: Hostile bodies fed on purpose, by the setting naming their queue: each must end in poison.
HOSTILE = {
    "NOTIFICATIONS_QUEUE": [b"chaos: not json {", b'{"event_id": "chaos-hostile-1"}',
                            b'{"id": "x", "DequeueCount": "1", "event_id": "chaos-hostile-2"}'],
    "IMPORT_QUEUE": [b'{"account": "../escape", "run_id": "x"}'],
    "JOB_UNITS_QUEUE": [b'{"not": "a job unit"}'],
}  # fmt: skip


def _hostile_poison_queue(setting: str, queue: str) -> str:
    """Where a hostile body ends: the units' poison queue has a trigger that poisons it again."""
    return f"{queue}-poison-poison" if setting == "JOB_UNITS_QUEUE" else f"{queue}-poison"


class RestartableAzurite:
    """Azurite with its data on disk, stopped and started again on the same ports."""

    def __init__(self) -> None:
        self.data_dir = tempfile.mkdtemp(prefix="chaos-azurite-")
        self._stack: contextlib.ExitStack | None = None
        self.ports: tuple[int, int, int] | None = None
        self.connection_string = ""

    def start(self) -> None:
        stack = contextlib.ExitStack()
        running = stack.enter_context(services.azurite(self.data_dir, ports=self.ports))
        self._stack = stack
        self.ports = (running.blob_port, running.queue_port, running.table_port)
        self.connection_string = running.connection_string

    def stop(self) -> None:
        if self._stack is not None:
            self._stack.close()
            self._stack = None

    def restart(self) -> float:
        """Stop and start again; returns the seconds it was down."""
        began = time.monotonic()
        self.stop()
        self.start()
        return time.monotonic() - began


@dataclass
class ChaosReport:
    seed: int
    instances: int
    seconds: float
    run_id: str
    faults: dict[str, Any]
    invariants: list[Invariant]
    settled: bool
    settle_s: float
    elapsed_s: float
    workload: dict[str, int]
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(i.held for i in self.invariants)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        return {**data, "ok": self.ok}

    def summary(self) -> str:
        lines = [
            f"chaos run {self.run_id}: seed {self.seed}, {self.instances} instances, "
            f"{self.seconds:.0f} s (+{self.settle_s:.0f} s to settle"
            + ("" if self.settled else ", did NOT settle")
            + ")",
            "  faults: " + ", ".join(f"{k} {v}" for k, v in self.faults["totals"].items()),
        ]
        for inv in self.invariants:
            shown = ", ".join(f"{k} {v}" for k, v in inv.numbers.items())
            lines.append(f"  {'held  ' if inv.held else 'BROKEN'} {inv.name}: {shown}")
        lines.append("OK: every invariant held" if self.ok else "FAILED")
        return "\n".join(lines)


class Chaos:
    """One chaos run: set up, run the flows and faults, settle, check."""

    def __init__(self, instances: int, seconds: float, seed: int, **host: Any) -> None:
        self.instances, self.seconds, self.seed = instances, seconds, seed
        self.host = host
        self.schedule = plan_faults(seed, seconds, instances)
        self.faults_end = seconds * 0.75
        self.executed: list[ExecutedFault] = []
        self.gate = threading.RLock()  # held while Azurite restarts: the harness waits
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.started_at = 0.0  # epoch seconds of the fault clock's zero
        self._paused: set[int] = set()
        self._killed_at: dict[int, float] = {}  # instance -> epoch of its last SIGKILL
        self._paused_lock = threading.Lock()
        self.job_run = JobRun.new(DEVHOST_INVOCATION_VISIBILITY="20")
        rid = self.job_run.run_id
        self.run_id = rid
        regular = [f"acct-{i:02d}" for i in range(max(3, int(seconds // 30)))]
        #: One more account per pause, whose files arrive at the pause's time: its import
        #: gives the pause a lease holder to stop whenever the schedule puts it.
        self.pause_accounts = {
            i: f"acct-p{i:02d}"
            for i, f in enumerate(self.schedule)
            if f.kind == "pause_lease_holder"
        }
        self.accounts = regular + list(self.pause_accounts.values())
        self.regular_accounts = len(regular)
        self.events = max(40, int(seconds))
        self.job_ids = [f"{rid}-job{j:02d}" for j in range(max(3, int(seconds // 30)))]
        self.containers = {
            **self.job_run.containers,
            "IMPORTS_CONTAINER": f"imports-{rid}",
            "EMAIL_OUTBOX_CONTAINER": f"outbox-{rid}",
        }
        self.queues = {"IMPORT_QUEUE": f"imp-{rid}", "JOB_UNITS_QUEUE": self.job_run.queue}
        self.notification_queues = [f"ntf-{rid}-{i}" for i in range(instances)]
        self.table = f"Members{rid}"
        self.expected_rows: dict[str, int] = {}

    # set-up

    def all_queues(self) -> list[str]:
        work = [*self.notification_queues, *self.queues.values()]
        return work + [f"{q}-poison" for q in work] + [f"{self.job_run.queue}-poison-poison"]

    def hostile(self) -> dict[str, list[bytes]]:
        """Hostile bodies by the queue they are fed to (the first instance's notifications)."""
        queue_of = {"NOTIFICATIONS_QUEUE": self.notification_queues[0], **self.queues}
        return {queue_of[setting]: bodies for setting, bodies in HOSTILE.items()}

    def expected_poison(self) -> dict[str, list[str]]:
        queue_of = {"NOTIFICATIONS_QUEUE": self.notification_queues[0], **self.queues}
        return {
            _hostile_poison_queue(s, queue_of[s]): [b.decode() for b in bodies]
            for s, bodies in HOSTILE.items()
        }

    def options(self, proxied: str) -> HostOptions:
        settings: dict[str, str | None] = {
            **self.job_run.settings,
            **self.containers,
            **self.queues,
            "IMPORT_SCHEDULE": "*/5 * * * * *",  # fans out again and again: once per night
            "IMPORT_ACCOUNTS": None,  # the accounts whose files have arrived
            "MEMBERS_TABLE": self.table,
            "IMPORT_REPORT_TO": "chaos-ops@example.com",
            "SENDGRID_API_KEY": None,  # emails go to the outbox: the recording stand-in
            "AzureFunctionsWebHost__hostid": f"chaos-{self.run_id}",
            "AzureWebJobsStorage": proxied,
        }
        functions = _common.functions_bound_to(
            ("NOTIFICATIONS_QUEUE", "IMPORT_SCHEDULE", "IMPORT_QUEUE", "JOB_UNITS_QUEUE",
             "JOB_WATCH_SCHEDULE"),
            self.host["app_module"], self.host["app_dir"],
        )  # fmt: skip
        return HostOptions(
            instances=self.instances,
            app_module=self.host["app_module"],
            app_dir=self.host["app_dir"],
            http_port=None,
            functions=functions,
            settings=settings,
            instance_settings={"NOTIFICATIONS_QUEUE": f"ntf-{self.run_id}-{{instance}}"},
            log_level=self.host["log_level"],
            log_file=self.host.get("log_file"),
            restart=True,  # a killed instance is replaced, as the platform does
        )

    def prepare(self) -> None:
        _common.reset_queues(self.all_queues())
        _common.create_containers(self.containers.values())
        for queue, bodies in self.hostile().items():
            _common.enqueue_all(((queue, body) for body in bodies), threads=1)
        self._upload(0)

    def _upload(self, number: int) -> None:
        account = from_settings().with_options(raw_request_hook=_common.scenario_counter)
        container = account.blob_service().get_container_client(
            self.containers["IMPORTS_CONTAINER"]
        )
        name = self.accounts[number]
        self.expected_rows[name] = imports.upload_account(container, number, name, ROWS_PER_ACCOUNT)

    # the workload, fed over the fault window

    def timeline(self, receiver_url: str) -> list[tuple[float, Callable[[], object]]]:
        """(seconds after the start, action): events, account files and jobs, spread out."""
        span = max(1.0, self.faults_end - 2.0)
        actions: list[tuple[float, Callable[[], object]]] = []
        for n in range(1, self.events + 1):
            body = json.dumps(notifications.event(n)).encode()
            actions.append((span * (n - 1) / self.events, partial(self._send_round, body)))
        for k in range(1, self.regular_accounts):
            actions.append((span * k / self.regular_accounts, partial(self._upload, k)))
        for index, name in self.pause_accounts.items():
            at = self.schedule[index].at
            actions.append((at, partial(self._upload, self.accounts.index(name))))
        for j, job_id in enumerate(self.job_ids):
            at = span * j / len(self.job_ids)
            actions.append((at, partial(self._submit, job_id, receiver_url)))
        return sorted(actions, key=lambda item: item[0])

    def _send_round(self, body: bytes) -> None:
        _common.enqueue_all(((q, body) for q in self.notification_queues), threads=4)

    def _submit(self, job_id: str, url: str) -> None:
        from shared.jobs import submit_job

        submit_job(job_request(job_id, UNITS_PER_JOB, url), self.job_run.store())

    def feed(self, timeline: list[tuple[float, Callable[[], object]]]) -> None:
        """Run each action at its time; never while Azurite restarts (the gate)."""
        try:
            for at, action in timeline:
                if self.stop.wait(max(0.0, self.started_at + at - time.time())):
                    return
                with self.gate:
                    action()
        except BaseException as error:  # reported; the run goes on to its checks
            log.exception("feeding failed")
            self.errors.append(error)

    # the faults

    def inject(self, supervisor: Supervisor, azurite: RestartableAzurite) -> None:
        """Carry out the schedule on time. A pause waits (in its own thread, until the end of
        the fault window at most) for a lease holder to show, so it never delays the others."""
        done: dict[int, ExecutedFault] = {}
        helpers: list[threading.Thread] = []

        def carry_out(index: int, fault: ScheduledFault) -> None:
            try:
                result = self._execute(fault, supervisor, azurite)
            except Exception as error:
                log.exception("fault %s failed", fault.kind)
                result = ExecutedFault(self._now(), fault.kind, fault.instance, None,
                                       f"error: {error!r}", injected=False)  # fmt: skip
            log.warning("fault at %.1f s: %s %s", result.at, result.kind, result.detail)
            done[index] = result

        for index, fault in enumerate(self.schedule):
            if self.stop.wait(max(0.0, self.started_at + fault.at - time.time())):
                break
            if fault.kind == "pause_lease_holder":
                helper = threading.Thread(target=carry_out, args=(index, fault), daemon=True)
                helper.start()
                helpers.append(helper)
            else:
                carry_out(index, fault)
        for helper in helpers:
            helper.join()
        self.executed = [done[i] for i in sorted(done)]

    def _now(self) -> float:
        return round(time.time() - self.started_at, 2)

    def _execute(
        self, fault: ScheduledFault, supervisor: Supervisor, azurite: RestartableAzurite
    ) -> ExecutedFault:
        if fault.kind == "kill_instance":
            assert fault.instance is not None
            pid = supervisor.pid(fault.instance)
            if pid is None:
                return ExecutedFault(self._now(), fault.kind, fault.instance, None, "no process",
                                     injected=False)  # fmt: skip
            os.kill(pid, signal.SIGKILL)
            self._killed_at[fault.instance] = time.time()
            return ExecutedFault(self._now(), fault.kind, fault.instance, pid, "SIGKILL")
        if fault.kind == "restart_azurite":
            with self.gate:
                at = self._now()
                down = azurite.restart()
            return ExecutedFault(at, fault.kind, detail=f"down {down:.1f} s, data kept")
        holder = self._lease_holder(supervisor, until=self.started_at + self.faults_end)
        if holder is None:
            return ExecutedFault(self._now(), fault.kind, detail="no lease held", injected=False)
        instance, pid, key, token = holder
        os.kill(pid, signal.SIGSTOP)
        at = self._now()
        with self._paused_lock:
            self._paused.add(pid)
        if not self.stop.wait(PAUSE_SECONDS):
            self._resume(pid)
        detail = f"SIGSTOP holder of {key} (token {token}) for {PAUSE_SECONDS:.0f} s"
        return ExecutedFault(at, fault.kind, instance, pid, detail)

    def _resume(self, pid: int) -> None:
        with self._paused_lock:
            if pid not in self._paused:
                return
            self._paused.discard(pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)

    def resume_all(self) -> None:
        with self._paused_lock:
            paused = list(self._paused)
        for pid in paused:
            self._resume(pid)

    def _lease_holder(
        self, supervisor: Supervisor, until: float
    ) -> tuple[int, int, str, int] | None:
        """(instance, pid, key, token) of a running instance holding an import lease.

        The lock blob gives the lease state and its fencing token; the holder's instance id
        comes from the owner record (published with its first renewal, 5 s in) or, sooner,
        from the import's attempt log for that token. A paused holder is passed over (its
        lease is held until it expires), and so is a killed process's lease."""
        while not self.stop.is_set() and time.time() < until:
            with self.gate:
                page = ops.list_locks(
                    "import-", limit=100, storage=from_settings(), namespace=f"chaos-{self.run_id}"
                )
            with self._paused_lock:
                paused = set(self._paused)
            for lock in page.items:
                if not lock["held"]:
                    continue
                found = self._holder_of(lock)
                if found is None:
                    continue
                number, since = found
                if since < self._killed_at.get(number, 0.0):
                    continue  # a killed process's lease, not yet expired: not its successor's
                pid = supervisor.pid(number)
                if pid is not None and pid not in paused:
                    return number, pid, lock["key"], lock["token"]
            self.stop.wait(0.2)
        return None

    def _holder_of(self, lock: dict[str, Any]) -> tuple[int, float] | None:
        """(instance number, acquired at) of a held import lock, or None if not known yet."""
        from shared.imports.layout import Layout

        instance = str(lock.get("instance") or "")
        if instance.startswith("devhost-"):
            since = datetime.fromisoformat(str(lock["since"])).timestamp()
            return int(instance.removeprefix("devhost-")), since
        account = str(lock["key"]).removeprefix("import-")
        name = Layout(account, datetime.now(UTC).date().isoformat()).attempt(int(lock["token"]))
        try:
            with self.gate:
                data = json.loads(self._imports_container().download_blob(name).readall())
        except ResourceNotFoundError:
            return None  # the holder has not started its attempt yet
        instance = str(data.get("instance") or "")
        if data.get("outcome") is not None or not instance.startswith("devhost-"):
            return None
        return int(instance.removeprefix("devhost-")), float(data["started_at"])

    # settling and checking

    def settled(self, store: Any, receiver: CallbackReceiver) -> bool:
        """Every account reported, every job called back and archived, then the notification
        and unit queues empty (a message being worked on is invisible, but counted).

        The import queue and the instances' in-flight count are not waited for: the nightly
        timer fires every 5 s on every instance and fans out again (skipped by `@once`)."""
        container = self._imports_container()
        for name in self.accounts:
            blobs = container.list_blobs(name_starts_with=f"{name}/reports/")
            if not any(b.name.endswith("/report.json") for b in blobs):
                return False
        called = set(receiver.by_job())
        if not all(j in called and store.read_job(j) is None for j in self.job_ids):
            return False
        if sum(_common.queue_depths(self._work_queues()).values()):
            return False
        outbox = self._container("EMAIL_OUTBOX_CONTAINER")
        emailed = {unquote(b.name.partition("/")[0]) for b in outbox.list_blobs()}
        return self.expected_event_ids() <= emailed

    def expected_event_ids(self) -> set[str]:
        """The notification events fed, and one import summary per account for tonight."""
        from shared.imports.keys import summary_event_id

        today = datetime.now(UTC).date().isoformat()
        expected = {notifications.event(n)["event_id"] for n in range(1, self.events + 1)}
        return expected | {summary_event_id(a, today) for a in self.accounts}

    def _work_queues(self) -> list[str]:
        return [
            q
            for q in self.all_queues()
            if not q.endswith("-poison") and q != self.queues["IMPORT_QUEUE"]
        ]

    def _container(self, setting: str) -> Any:
        account = from_settings().with_options(raw_request_hook=_common.scenario_counter)
        return account.blob_service().get_container_client(self.containers[setting])

    def _imports_container(self) -> Any:
        return self._container("IMPORTS_CONTAINER")

    def check(self, receiver: CallbackReceiver) -> list[Invariant]:
        from azure.data.tables import TableServiceClient

        from shared.imports.member_table import is_member_row
        from shared.notifications.outbox import read_outbox

        emails = read_outbox(self.containers["EMAIL_OUTBOX_CONTAINER"])
        sent = [SentEmail(e.event_id, self._at(e.created)) for e in emails]
        expected = self.expected_event_ids()

        members = TableServiceClient.from_connection_string(
            os.environ["AzureWebJobsStorage"], raw_request_hook=_common.scenario_counter
        ).get_table_client(self.table)
        container = self._imports_container()
        results = []
        for name in self.accounts:
            result, _ = imports.account_result(
                container, members, emails, name, ROWS_PER_ACCOUNT, self.expected_rows[name]
            )
            rows = [
                (int(e.get("FencingToken", 0)), self._modified(e))
                for e in members.query_entities(f"PartitionKey eq '{name}'")
                if is_member_row(e["RowKey"])
            ]
            results.append(AccountImport(
                name, result.expected_imported, result.imported, result.members_in_table,
                result.runs, result.completed_runs, result.files_left_in_incoming,
                count_stale_writes(rows),
            ))  # fmt: skip

        store = self.job_run.store()
        archived = {}
        for job_id in self.job_ids:
            record = store.read_archive(job_id)
            if record is not None:
                archived[job_id] = int(record["completion"]["units_failed"])
        posts = [(p.job_id, p.idempotency_key) for p in receiver.posts]

        found: dict[str, list[str]] = {}
        for queue in self.all_queues():
            if queue.endswith("-poison"):
                bodies = self._peek_all(queue)
                if bodies:
                    found[queue] = bodies
        return [
            check_emails(sent, expected, self.executed, self.faults_end),
            check_imports(results),
            check_callbacks(self.job_ids, posts, archived),
            check_poison(found, self.expected_poison()),
        ]

    @staticmethod
    def _modified(entity: Any) -> float:
        """The row's last write, on the storage service's clock (epoch seconds)."""
        stamp = entity.metadata.get("timestamp")
        return float(stamp.timestamp()) if stamp is not None else 0.0

    def _at(self, created: datetime | None) -> float:
        return round((created.timestamp() if created else time.time()) - self.started_at, 2)

    @staticmethod
    def _peek_all(queue: str) -> list[str]:
        """Every body in a (small) poison queue, left in place: received invisibly for a
        moment, then made visible again."""
        client = _common.queue_client(queue)
        bodies: list[str] = []
        received = []
        with contextlib.suppress(Exception):
            for message in client.receive_messages(messages_per_page=32, visibility_timeout=30):
                bodies.append(bytes(message.content).decode("utf-8", "replace"))
                received.append(message)
        for message in received:
            with contextlib.suppress(Exception):
                client.update_message(message, visibility_timeout=0)
        return bodies


def _proxy_counts(proxies: dict[str, FaultProxy]) -> dict[str, dict[str, int]]:
    return {name: {k: int(p.counts.get(k, 0)) for k in ("reset", "stall", "latency")}
            for name, p in proxies.items()}  # fmt: skip


@contextlib.contextmanager
def _proxies(
    azurite: RestartableAzurite, seed: int, rates: FaultRates
) -> Iterator[dict[str, FaultProxy]]:
    assert azurite.ports is not None
    started: dict[str, FaultProxy] = {}
    try:
        for k, (name, port) in enumerate(zip(SERVICES, azurite.ports, strict=True)):
            started[name] = FaultProxy(port, rates, seed=seed * 10 + k).start()
        yield started
    finally:
        for proxy in started.values():
            proxy.stop()


def run(
    instances: int = 8,
    seconds: float = 180.0,
    seed: int = 1,
    *,
    app_module: str = "function_app",
    app_dir: str = ".",
    log_level: str = "WARNING",
    log_file: str | None = None,
    settle_timeout: float | None = None,
    rates: FaultRates = RATES,
) -> ChaosReport:
    """One chaos run on a private Azurite (its data in a temporary folder, removed after)."""
    began = time.monotonic()
    chaos = Chaos(instances, seconds, seed, app_module=app_module, app_dir=app_dir,
                  log_level=log_level, log_file=log_file)  # fmt: skip
    azurite = RestartableAzurite()
    saved = os.environ.get("AzureWebJobsStorage")
    try:
        azurite.start()
        os.environ["AzureWebJobsStorage"] = azurite.connection_string  # the harness: direct
        app_settings = _common.use_app_settings(app_dir)
        apply_settings({**chaos.job_run.settings, **chaos.containers, **chaos.queues,
                        "MEMBERS_TABLE": chaos.table})  # fmt: skip
        with (
            _proxies(azurite, seed, rates) as proxies,
            CallbackReceiver() as receiver,
        ):
            assert azurite.ports is not None
            proxied = services.azurite_connection_string(
                "127.0.0.1", *(proxies[s].listen_port for s in SERVICES)
            )
            chaos.prepare()
            options = chaos.options(proxied)
            log.info("chaos run %s: %d instances, %.0f s, seed %d; schedule %s", chaos.run_id,
                     instances, seconds, seed, [f.as_dict() for f in chaos.schedule])  # fmt: skip
            settled, settle_s = False, 0.0
            with _common.running(options, app_settings) as supervisor:
                chaos.started_at = time.time()
                threads = [
                    threading.Thread(target=chaos.feed, args=(chaos.timeline(receiver.url),),
                                     name="chaos-feed", daemon=True),
                    threading.Thread(target=chaos.inject, args=(supervisor, azurite),
                                     name="chaos-faults", daemon=True),
                ]  # fmt: skip
                for thread in threads:
                    thread.start()
                try:
                    chaos.stop.wait(max(0.0, chaos.started_at + chaos.faults_end - time.time()))
                    for proxy in proxies.values():
                        proxy.set_enabled(False)  # the network faults end with the window
                    for thread in threads:
                        thread.join()
                    chaos.resume_all()
                    settle_from = time.monotonic()
                    limit = settle_timeout if settle_timeout is not None else max(180.0, seconds)
                    store = chaos.job_run.store()
                    while time.monotonic() - settle_from < limit:
                        with contextlib.suppress(Exception):
                            if chaos.settled(store, receiver):
                                settled = True
                                break
                        time.sleep(1.0)
                    settle_s = time.monotonic() - settle_from
                finally:
                    chaos.stop.set()
                    chaos.resume_all()
                restarts = supervisor.restarts()
            invariants = chaos.check(receiver)
            counts = _proxy_counts(proxies)
        totals: dict[str, int] = {}
        for fault in chaos.executed:
            totals[fault.kind] = totals.get(fault.kind, 0) + int(fault.injected)
        for by_kind in counts.values():
            for kind, n in by_kind.items():
                totals[kind] = totals.get(kind, 0) + n
        return ChaosReport(
            seed=seed,
            instances=instances,
            seconds=seconds,
            run_id=chaos.run_id,
            faults={
                "scheduled": [f.as_dict() for f in chaos.schedule],
                "executed": [f.as_dict() for f in chaos.executed],
                "proxy": counts,
                "totals": totals,
                "restarts_by_instance": {str(k): v for k, v in sorted(restarts.items())},
            },
            invariants=invariants,
            settled=settled,
            settle_s=round(settle_s, 1),
            elapsed_s=round(time.monotonic() - began, 1),
            workload={
                "events": chaos.events,
                "deliveries": chaos.events * instances,
                "accounts": len(chaos.accounts),
                "rows_per_account": ROWS_PER_ACCOUNT,
                "jobs": len(chaos.job_ids),
                "units_per_job": UNITS_PER_JOB,
                "hostile_bodies": sum(len(b) for b in HOSTILE.values()),
            },
            notes=[f"feeding error: {e!r}" for e in chaos.errors],
        )
    finally:
        azurite.stop()
        if saved is None:
            os.environ.pop("AzureWebJobsStorage", None)
        else:
            os.environ["AzureWebJobsStorage"] = saved
        import shutil

        shutil.rmtree(azurite.data_dir, ignore_errors=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--instances", type=int, default=8, choices=range(1, 65), metavar="N")
    parser.add_argument("--minutes", type=float, default=3.0, help="run length (faults: 75%%)")
    parser.add_argument("--seed", type=int, default=1, help="the same seed, the same schedule")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument(
        "--settle-timeout", type=float, default=None,
        help="seconds to wait for the queues to drain after the faults (default: max(180, run))",
    )  # fmt: skip
    parser.add_argument("--log-file", default=None, help="the instances' log (default: stderr)")
    parser.add_argument(
        "--fault-rates", type=parse_rates, default=RATES, metavar="reset=P,stall=P,latency=P",
        help=f"network faults per new connection (default reset={RATES.reset},"
        f"stall={RATES.stall},latency={RATES.latency})",
    )  # fmt: skip


def parse_rates(text: str) -> FaultRates:
    """`reset=0.1,stall=0.05` on top of the defaults (a short run needs more to see each)."""
    values = {"reset": RATES.reset, "stall": RATES.stall, "latency": RATES.latency}
    try:
        for part in text.split(","):
            name, _, value = part.partition("=")
            if name.strip() not in values:
                raise ValueError(f"unknown fault {name!r}")
            values[name.strip()] = float(value)
        return FaultRates(**values, stall_seconds=RATES.stall_seconds,
                          latency_seconds=RATES.latency_seconds)  # fmt: skip
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def main(args: argparse.Namespace) -> int:
    seconds = args.minutes * 60.0
    if seconds < 20:
        raise SystemExit("harness chaos: --minutes must be at least 1/3 (20 s)")
    report = run(
        args.instances, seconds, args.seed, app_module=args.app, app_dir=args.app_dir,
        log_level=args.log_level, log_file=args.log_file, settle_timeout=args.settle_timeout,
        rates=args.fault_rates,
    )  # fmt: skip
    if args.json:
        print(json.dumps(report.to_dict(), default=str), flush=True)
    else:
        print(report.summary(), flush=True)
    return 0 if report.ok else 1
