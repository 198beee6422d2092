"""The chaos run's workload: its names, the instances' settings, and what is fed when.

Notifications (every event on every instance's queue), nightly imports (a repeating timer, one
account's files arriving after another, one more account per scheduled pause so the pause has
an import lease holder to stop) and batch jobs (submitted one after another, called back on a
local receiver), plus hostile bodies that must end in poison. The harness reaches storage
directly through `storage` (its own clients); the instances get every setting explicitly in
`options` (their storage through the fault proxies).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from blobsingleton import StorageAccount

from devhost.supervisor import HostOptions
from harness import kit
from harness.faults import ScheduledFault
from harness.feeding import job_request
from harness.scenarios import imports, notifications
from harness.scenarios.batch import JobRun

log = logging.getLogger("harness.chaos")

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


class Workload:
    """One run's names and feed; `storage` is the harness's direct account."""

    def __init__(
        self,
        instances: int,
        seconds: float,
        schedule: list[ScheduledFault],
        storage: StorageAccount,
    ) -> None:
        self.instances, self.seconds, self.storage = instances, seconds, storage
        self.faults_end = seconds * 0.75
        self.job_run = JobRun.new(DEVHOST_INVOCATION_VISIBILITY="20")
        rid = self.run_id = self.job_run.run_id
        regular = [f"acct-{i:02d}" for i in range(max(3, int(seconds // 30)))]
        #: One more account per pause, whose files arrive at the pause's time (name -> at).
        self.pause_accounts = {
            f"acct-p{i:02d}": fault.at
            for i, fault in enumerate(schedule)
            if fault.kind == "pause_lease_holder"
        }
        self.accounts = regular + list(self.pause_accounts)
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
        self.namespace = f"chaos-{rid}"  # the instances' host id: leases and records live there
        self.rows_per_account = ROWS_PER_ACCOUNT
        self.expected_rows: dict[str, int] = {}
        self.errors: list[BaseException] = []

    # names

    def all_queues(self) -> list[str]:
        announce = f"{self.job_run.queue}-announce"  # finished jobs' callbacks, from the watcher
        work = [*self.notification_queues, *self.queues.values(), announce]
        return work + [f"{q}-poison" for q in work] + [f"{self.job_run.queue}-poison-poison"]

    def work_queues(self) -> list[str]:
        """The queues that must drain (the import queue refills every 5 s, by design)."""
        return [
            q
            for q in self.all_queues()
            if not q.endswith("-poison") and q != self.queues["IMPORT_QUEUE"]
        ]

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

    def settings(self) -> dict[str, str | None]:
        """The run's names, as settings (the instances get them, and so does the harness)."""
        return {
            **self.job_run.settings,
            **self.containers,
            **self.queues,
            "MEMBERS_TABLE": self.table,
        }

    def container(self, setting: str) -> Any:
        """The harness's own client for one of the run's containers."""
        service = kit.harness_account(self.storage).blob_service()
        return service.get_container_client(self.containers[setting])

    # the instances

    def options(self, proxied: str, app_module: str, app_dir: str, **host: Any) -> HostOptions:
        """Every setting the instances get, explicitly; their storage is `proxied`."""
        settings: dict[str, str | None] = {
            **self.settings(),
            "IMPORT_SCHEDULE": "*/5 * * * * *",  # fans out again and again: once per night
            "IMPORT_ACCOUNTS": None,  # the accounts whose files have arrived
            "IMPORT_REPORT_TO": "chaos-ops@example.com",
            "SENDGRID_API_KEY": None,  # emails go to the outbox: the recording stand-in
            "AzureFunctionsWebHost__hostid": self.namespace,
            "AzureWebJobsStorage": proxied,
        }
        functions = kit.functions_bound_to(
            ("NOTIFICATIONS_QUEUE", "IMPORT_SCHEDULE", "IMPORT_QUEUE", "JOB_UNITS_QUEUE",
             "JOB_WATCH_SCHEDULE"),
            app_module, app_dir,
        )  # fmt: skip
        return HostOptions(
            instances=self.instances,
            app_module=app_module,
            app_dir=app_dir,
            http_port=None,
            functions=functions,
            settings=settings,
            instance_settings={"NOTIFICATIONS_QUEUE": f"ntf-{self.run_id}-{{instance}}"},
            restart=True,  # a killed instance is replaced, as the platform does
            **host,
        )

    # the feed

    def prepare(self) -> None:
        kit.reset_queues(self.all_queues(), self.storage)
        kit.create_containers(self.containers.values(), self.storage)
        for queue, bodies in self.hostile().items():
            kit.enqueue_all(((queue, body) for body in bodies), self.storage, threads=1)
        self._upload(0)

    def _upload(self, number: int) -> None:
        name = self.accounts[number]
        rows = imports.upload_account(
            self.container("IMPORTS_CONTAINER"), number, name, self.rows_per_account
        )
        self.expected_rows[name] = rows

    def timeline(self, receiver_url: str) -> list[tuple[float, Callable[[], object]]]:
        """(seconds after the start, action): events, account files and jobs, spread out."""
        span = max(1.0, self.faults_end - 2.0)
        actions: list[tuple[float, Callable[[], object]]] = []
        for n in range(1, self.events + 1):
            body = json.dumps(notifications.event(n)).encode()
            actions.append((span * (n - 1) / self.events, partial(self._send_round, body)))
        for k in range(1, self.regular_accounts):
            actions.append((span * k / self.regular_accounts, partial(self._upload, k)))
        for name, at in self.pause_accounts.items():
            actions.append((at, partial(self._upload, self.accounts.index(name))))
        for j, job_id in enumerate(self.job_ids):
            at = span * j / len(self.job_ids)
            actions.append((at, partial(self._submit, job_id, receiver_url)))
        return sorted(actions, key=lambda item: item[0])

    def _send_round(self, body: bytes) -> None:
        kit.enqueue_all(((q, body) for q in self.notification_queues), self.storage, threads=4)

    def _submit(self, job_id: str, url: str) -> None:
        from shared.jobs import submit_job

        submit_job(job_request(job_id, UNITS_PER_JOB, url), self.job_run.store())

    def feed(
        self,
        timeline: list[tuple[float, Callable[[], object]]],
        started_at: float,
        gate: threading.RLock,
        stop: threading.Event,
    ) -> None:
        """Run each action at its time; never while Azurite restarts (the gate)."""
        try:
            for at, action in timeline:
                if stop.wait(max(0.0, started_at + at - time.time())):
                    return
                with gate:
                    action()
        except BaseException as error:  # reported; the run goes on to its checks
            log.exception("feeding failed")
            self.errors.append(error)
