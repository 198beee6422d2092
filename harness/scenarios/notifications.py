"""Scenario "every event reaches every instance": N instances, each on its own queue.

Each instance reads `NOTIFICATIONS_QUEUE` = its own queue and every event is put on every
queue, like one subscription per instance, so every instance really sees every event. The app
must still email each event exactly once; the outbox (no SENDGRID_API_KEY) shows whether it did.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from devhost.supervisor import HostOptions, Supervisor
from harness import kit

NAME = "notifications"
HELP = "every event reaches every instance; each event must be emailed exactly once"

log = logging.getLogger("harness.scenario")

#: 0 = every event is enqueued before the instances start (steady full batches, the numbers
#: to compare). N > 0 keeps at most N events queued per instance and feeds the rest while they
#: run: faster on Azurite, whose queue operations slow down with thousands of messages queued,
#: but queues run empty more often, so the host polls more and more duplicates race.
DEFAULT_BACKLOG = 0


@dataclass(frozen=True)
class NotificationsReport:
    instances: int
    events: int
    emails_sent: int
    distinct_events_emailed: int
    duplicates: int
    missing: int
    poisoned: int
    app_storage_requests: int
    app_requests_per_event: float
    #: Of the app's requests, blob requests (run-once records, outbox writes) per event.
    app_blob_requests_per_event: float
    host_storage_requests: int
    host_requests_per_event: float
    elapsed_s: float
    events_per_s: float
    deliveries: int
    invocations: int
    #: Copies re-enqueued because another instance was sending the same event: every
    #: invocation beyond the deliveries is one (counted from the host's invocations, which the
    #: app cannot fake).
    deferrals: int
    failed_invocations: int
    drained: bool
    run_id: str
    #: With `--server-errors`: what the proxies injected (counts per service, each error).
    server_errors: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.drained and self.duplicates == 0 and self.missing == 0

    def summary(self) -> str:
        verdict = "OK: every event emailed exactly once" if self.ok else "FAILED"
        return "\n".join([
            f"notifications scenario ({self.run_id}): {self.instances} instances x "
            f"{self.events} events = {self.deliveries} deliveries",
            f"  emails sent        {self.emails_sent} for {self.distinct_events_emailed} "
            f"distinct events (duplicates {self.duplicates}, missing {self.missing})",
            f"  invocations        {self.invocations} ({self.failed_invocations} failed), "
            f"deferrals {self.deferrals}, poisoned {self.poisoned}",
            f"  storage requests   app {self.app_storage_requests} "
            f"({self.app_requests_per_event:.1f}/event, blob {self.app_blob_requests_per_event:.1f}"
            f"/event), host {self.host_storage_requests} "
            f"({self.host_requests_per_event:.1f}/event)",
            f"  time               {self.elapsed_s:.1f} s ({self.events_per_s:.1f} events/s)"
            + ("" if self.drained else "  -- queues did NOT drain before the timeout"),
            *self._server_error_lines(),
            verdict,
        ])  # fmt: skip

    def _server_error_lines(self) -> list[str]:
        by_service = self.server_errors.get("by_service", {})
        return [
            f"  server errors      {name}: "
            + ", ".join(f"{kind} {n}" for kind, n in counts.items())
            for name, counts in by_service.items()
        ]


def event(number: int) -> dict[str, str]:
    return {
        "event_id": f"evt-{number:06d}",
        "type": "order.shipped",
        "to": f"user{number % 97}@example.com",
        "subject": f"Your order {number} has shipped",
        "text": f"Order {number} is on its way.",
    }


def run(
    instances: int = 8,
    events: int = 1000,
    *,
    app_module: str = "function_app",
    app_dir: str = ".",
    timeout: float = 600.0,
    backlog: int = DEFAULT_BACKLOG,
    keep: bool = False,
    log_level: str = "INFO",
    log_file: str | None = None,
    watch: Callable[[Supervisor], object] | None = None,
) -> NotificationsReport:
    """Run the scenario against the storage account in AzureWebJobsStorage."""
    from shared.notifications.outbox import read_outbox

    app_settings = kit.use_app_settings(app_dir)
    functions = kit.functions_bound_to("NOTIFICATIONS_QUEUE", app_module, app_dir)
    run_id = kit.new_run_id()
    queues = [f"ntf-{run_id}-{i}" for i in range(instances)]
    poison_queues = [f"{q}-poison" for q in queues]
    containers = {
        "RUNONCE_CONTAINER": f"runonce-{run_id}",
        "LEASE_CONTAINER": f"locks-{run_id}",
        "EMAIL_OUTBOX_CONTAINER": f"outbox-{run_id}",
    }
    log.info(
        "run %s: %d instances, %d events; queues ntf-%s-{0..%d}, containers %s",
        run_id,
        instances,
        events,
        run_id,
        instances - 1,
        ", ".join(containers.values()),
    )
    kit.reset_queues(queues + poison_queues)
    kit.create_containers(containers.values())
    rounds = [  # one round = one event on every instance's queue
        [(q, json.dumps(event(n)).encode()) for q in queues] for n in range(1, events + 1)
    ]
    first = rounds if backlog <= 0 else rounds[:backlog]
    sent = kit.enqueue_all(m for r in first for m in r)
    log.info("enqueued %d messages before starting the instances", sent)

    def feed_the_rest(supervisor: Supervisor) -> None:
        rest = rounds[len(first) :]
        if not rest:
            return
        try:
            fed = kit.feed_with_backlog(rest, supervisor, backlog=backlog, timeout=timeout)
        except (TimeoutError, RuntimeError) as error:
            log.error("feeding stopped: %s", error)  # the report will show what is missing
            return
        log.info("fed %d more messages (at most %d events queued per instance)", fed, backlog)

    options = HostOptions(
        instances=instances,
        app_module=app_module,
        app_dir=app_dir,
        http_port=None,
        functions=functions,  # only what this scenario measures: no other timers or queues
        settings={**containers, "SENDGRID_API_KEY": None, **kit.instance_storage()},
        instance_settings={"NOTIFICATIONS_QUEUE": f"ntf-{run_id}-{{instance}}"},
        log_level=log_level,
        log_file=log_file,
    )
    result = kit.run_until_drained(
        options, queues, app_settings=app_settings, timeout=timeout, while_running=feed_the_rest,
        watch=watch,
    )  # fmt: skip
    emails = read_outbox(containers["EMAIL_OUTBOX_CONTAINER"])
    distinct = len({e.event_id for e in emails})
    poisoned = sum(kit.queue_depths(poison_queues).values())
    totals = result.totals
    report = NotificationsReport(
        instances=instances,
        events=events,
        emails_sent=len(emails),
        distinct_events_emailed=distinct,
        duplicates=len(emails) - distinct,
        missing=events - distinct,
        poisoned=poisoned,
        app_storage_requests=totals.app_storage_requests,
        app_requests_per_event=round(totals.app_storage_requests / max(events, 1), 2),
        app_blob_requests_per_event=round(totals.app_blob_requests / max(events, 1), 2),
        host_storage_requests=totals.host_storage_requests,
        host_requests_per_event=round(totals.host_storage_requests / max(events, 1), 2),
        elapsed_s=round(result.elapsed_s, 2),
        events_per_s=round(events / result.elapsed_s, 1),
        deliveries=instances * events,
        invocations=totals.total_invocations,
        deferrals=max(
            0, totals.total_invocations - instances * events - sum(totals.failures.values())
        ),
        failed_invocations=sum(totals.failures.values()),
        drained=result.drained,
        run_id=run_id,
        server_errors=kit.server_error_report(),
    )
    if not keep:
        kit.delete_queues(queues + [q for q in poison_queues if not poisoned])
        kit.delete_containers(
            [containers["RUNONCE_CONTAINER"], containers["LEASE_CONTAINER"]]
            + ([] if not report.ok else [containers["EMAIL_OUTBOX_CONTAINER"]])
        )
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--instances", type=int, default=8, choices=range(1, 257), metavar="N")
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds to wait for the queues to drain"
    )
    parser.add_argument(
        "--backlog",
        type=int,
        default=DEFAULT_BACKLOG,
        help="0 (default): enqueue every event before starting; N: keep at most N events "
        "queued per instance and feed the rest while running (faster on Azurite, more polling)",
    )
    kit.add_server_error_arguments(parser)


def main(args: argparse.Namespace) -> int:
    with kit.scenario_storage(
        args.azurite, args.app_dir, server_errors=args.server_errors, spare=tuple(args.spare),
        seed=args.seed, faults_on_harness=args.faults_on_harness,
    ):  # fmt: skip
        report = run(
            args.instances,
            args.events,
            app_module=args.app,
            app_dir=args.app_dir,
            timeout=args.timeout,
            backlog=args.backlog,
            keep=args.keep,
            log_level=args.log_level,
        )
    kept = "its storage is kept" if args.keep else "its outbox container is kept for inspection"
    return kit.print_report(report, args.json, kept=kept)
