"""Scenario "batch jobs": N instances work M jobs of K units; each job must call back once.

The instances start, then the jobs are submitted with the app's own code (record, counter,
one message per unit, enqueued as the queue has room: see harness/feeding.py). A local receiver
records the callbacks. With --kill-rate, that fraction of unit invocations (first
deliveries) SIGKILLs its instance half-way, taking its other in-flight invocations down at
whatever step they are; the supervisor restarts it. The report: callbacks per job (exactly
one each; a repeat is only allowed with the same Idempotency-Key, after a kill during the
POST), completion latency after each job's last unit, storage requests per unit, kills."""

from __future__ import annotations

import argparse
import logging
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from devhost.supervisor import HostOptions
from devhost.worker import apply_settings
from harness import kit
from harness.callbacks import RECEIVER_SETTINGS, CallbackReceiver
from harness.feeding import DEFAULT_BACKLOG, submit_jobs
from shared.jobs import JobSettings, JobStore

NAME = "batch"
HELP = "batch jobs fanned out over N instances, with kills; one callback per job"

log = logging.getLogger("harness.scenario")


@dataclass(frozen=True)
class JobRun:
    """Names and settings of one run's job app."""

    run_id: str
    queue: str
    containers: dict[str, str]
    settings: dict[str, str | None]

    @classmethod
    def new(cls, **overrides: str) -> JobRun:
        run_id = kit.new_run_id()
        containers = {
            "JOBS_CONTAINER": f"jobs-{run_id}",
            "RUNONCE_CONTAINER": f"runonce-{run_id}",
            "LEASE_CONTAINER": f"locks-{run_id}",
        }
        queue = f"jobu-{run_id}"
        settings: dict[str, str | None] = {
            **containers,
            "JOB_UNITS_QUEUE": queue,
            "JOB_WATCH_SCHEDULE": "*/5 * * * * *",
            "JOB_STALL_SECONDS": "5",
            "JOB_CALLBACK_TIMEOUT": "2",
            "JOB_CALLBACK_ATTEMPTS": "3",
            **RECEIVER_SETTINGS,  # the run's CallbackReceiver: loopback, plain http
            **overrides,
        }
        return cls(run_id, queue, containers, settings)

    @property
    def queues(self) -> list[str]:
        announce = f"{self.queue}-announce"
        return [self.queue, f"{self.queue}-poison", announce, f"{announce}-poison"]

    def prepare(self) -> None:
        kit.reset_queues(self.queues)
        kit.create_containers(self.containers.values())

    def clean_up(self) -> None:
        kit.delete_queues(self.queues)
        kit.delete_containers(self.containers.values())

    def store(self) -> JobStore:
        return JobStore(JobSettings(container=self.containers["JOBS_CONTAINER"], queue=self.queue))


def wait_for_archives(
    store: JobStore, job_ids: list[str], receiver: CallbackReceiver, timeout: float
) -> dict[str, dict[str, Any]]:
    """The archive record of every job, once each job is archived (or the timeout passes)."""
    archived: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    last_log = 0.0
    while time.monotonic() < deadline:
        called = set(receiver.by_job())
        for job_id in job_ids:
            if job_id not in archived and job_id in called:
                record = store.read_archive(job_id)
                if record is not None and store.read_job(job_id) is None:
                    archived[job_id] = record
        if len(archived) == len(job_ids):
            break
        if time.monotonic() - last_log > 5:
            last_log = time.monotonic()
            log.info("%d of %d jobs finished and archived", len(archived), len(job_ids))
        time.sleep(0.5)
    return archived


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "max": None}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "p50": round(statistics.median(ordered), 3),
        "p95": round(p95, 3),
        "max": round(ordered[-1], 3),
    }


def latencies(
    archived: dict[str, dict[str, Any]], receiver: CallbackReceiver
) -> dict[str, list[float]]:
    """Seconds from each job's last unit to its first callback, by who finalized it."""
    first_post = {
        job: min(p.received_at for p in posts) for job, posts in receiver.by_job().items()
    }
    found: dict[str, list[float]] = {}
    for job_id, record in archived.items():
        completion = record["completion"]
        delay = first_post[job_id] - float(completion["last_unit_at"])
        found.setdefault(str(completion["finalized_by"]), []).append(delay)
    return found


@dataclass
class BatchReport:
    run_id: str
    instances: int
    jobs: int
    units_per_job: int
    kill_rate: float
    instances_killed: int
    callbacks_per_job: dict[str, int]
    jobs_with_exactly_one_callback: int
    jobs_with_same_key_repeat: int
    jobs_without_callback: int
    wrong_idempotency_keys: int
    jobs_archived: int
    outcomes: dict[str, int]
    finalized_by: dict[str, int]
    completion_latency_s: dict[str, float | None]
    completion_latency_by_finalizer_s: dict[str, dict[str, float | None]]
    storage_requests_per_unit: float
    host_storage_requests_per_unit: float
    units: int
    units_per_s: float
    elapsed_s: float
    invocations: dict[str, int]
    failed_invocations: int
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.jobs_archived == self.jobs
            and self.jobs_without_callback == 0
            and self.wrong_idempotency_keys == 0
            and max(self.callbacks_per_job.values(), default=0) <= 2
        )

    def summary(self) -> str:
        lat = self.completion_latency_s
        return "\n".join([
            f"batch scenario ({self.run_id}): {self.instances} instances, {self.jobs} jobs x "
            f"{self.units_per_job} units, kill rate {self.kill_rate}",
            f"  callbacks          exactly one: {self.jobs_with_exactly_one_callback}/{self.jobs}"
            f", same-key repeats {self.jobs_with_same_key_repeat}, missing "
            f"{self.jobs_without_callback}, wrong keys {self.wrong_idempotency_keys}",
            f"  outcomes           {self.outcomes}, finalized by {self.finalized_by}",
            f"  latency            after the last unit: p50 {lat['p50']} s, p95 {lat['p95']} s,"
            f" max {lat['max']} s",
            f"  storage requests   {self.storage_requests_per_unit}/unit (app), "
            f"{self.host_storage_requests_per_unit}/unit (host)",
            f"  instances killed   {self.instances_killed}",
            f"  time               {self.elapsed_s} s ({self.units_per_s} units/s)",
            "OK: every job called back once" if self.ok else "FAILED",
        ])  # fmt: skip


def run(
    instances: int = 8,
    jobs: int = 20,
    units: int = 500,
    *,
    kill_rate: float = 0.0,
    app_module: str = "function_app",
    app_dir: str = ".",
    timeout: float = 900.0,
    keep: bool = False,
    log_level: str = "INFO",
    backlog: int = DEFAULT_BACKLOG,
) -> BatchReport:
    """Run the scenario against the storage account in AzureWebJobsStorage."""
    app_settings = kit.use_app_settings(app_dir)
    job_run = JobRun.new(
        JOB_UNIT_HANDLER="harness.apps.batch_handler:work",
        BATCH_KILL_RATE=str(kill_rate),
        DEVHOST_INVOCATION_VISIBILITY="20",
    )
    job_run.prepare()
    apply_settings(job_run.settings)  # this process submits the jobs with the same settings
    options = HostOptions(
        instances=instances,
        app_module=app_module,
        app_dir=app_dir,
        http_port=None,
        settings=job_run.settings,
        restart=True,
        log_level=log_level,
    )
    job_ids = [f"{job_run.run_id}-job{j:03d}" for j in range(jobs)]
    log.info("run %s: %d instances, %d jobs x %d units", job_run.run_id, instances, jobs, units)
    errors: list[BaseException] = []
    stop = threading.Event()
    with CallbackReceiver() as receiver, kit.running(options, app_settings) as supervisor:
        started = time.monotonic()
        feeder = submit_jobs(
            job_ids, units, receiver.url, max_backlog=backlog, stop=stop, on_error=errors.append
        )
        archived = wait_for_archives(job_run.store(), job_ids, receiver, timeout)
        elapsed = time.monotonic() - started
        restarts = supervisor.restarts()
        stop.set()
        feeder.join(30)
    if errors:
        raise RuntimeError(f"submitting the jobs failed: {errors[0]!r}") from errors[0]
    totals = supervisor.totals()
    shape = {"instances": instances, "units": units, "kill_rate": kill_rate}
    report = _report(shape, job_run, job_ids, archived, receiver, totals, restarts, elapsed)
    if not keep and report.ok:
        job_run.clean_up()
    return report


def _report(
    shape: dict[str, Any],
    job_run: JobRun,
    job_ids: list[str],
    archived: dict[str, dict[str, Any]],
    receiver: CallbackReceiver,
    totals: Any,
    restarts: dict[int, int],
    elapsed: float,
) -> BatchReport:
    by_job = receiver.by_job()
    counts = {job_id: len(by_job.get(job_id, [])) for job_id in job_ids}
    wrong = sum(
        1 for job_id in job_ids for p in by_job.get(job_id, []) if p.idempotency_key != job_id
    )
    units_total = sum(int(r["completion"]["units_done"]) + int(r["completion"]["units_failed"])
                      for r in archived.values())  # fmt: skip
    by_finalizer = latencies(archived, receiver)
    return BatchReport(
        run_id=job_run.run_id,
        instances=shape["instances"],
        jobs=len(job_ids),
        units_per_job=shape["units"],
        kill_rate=shape["kill_rate"],
        instances_killed=sum(restarts.values()),
        callbacks_per_job=counts,
        jobs_with_exactly_one_callback=sum(1 for n in counts.values() if n == 1),
        jobs_with_same_key_repeat=sum(1 for n in counts.values() if n > 1),
        jobs_without_callback=sum(1 for n in counts.values() if n == 0),
        wrong_idempotency_keys=wrong,
        jobs_archived=len(archived),
        outcomes=dict(Counter(str(r["completion"]["status"]) for r in archived.values())),
        finalized_by={k: len(v) for k, v in by_finalizer.items()},
        completion_latency_s=percentiles([d for v in by_finalizer.values() for d in v]),
        completion_latency_by_finalizer_s={k: percentiles(v) for k, v in by_finalizer.items()},
        storage_requests_per_unit=round(totals.app_storage_requests / max(units_total, 1), 3),
        host_storage_requests_per_unit=round(totals.host_storage_requests / max(units_total, 1), 3),
        units=units_total,
        units_per_s=round(units_total / elapsed, 1),
        elapsed_s=round(elapsed, 1),
        invocations=totals.invocations,
        failed_invocations=sum(totals.failures.values()),
        notes=[
            "storage requests per unit: everything the instances' app code did (2 per unit for "
            "completion tracking, redeliveries, finalizing, archiving, the watcher sweeps of "
            "every instance, SDK retries), divided by the units; submission ran in the "
            "scenario process and is not counted",
            "latency: from the last unit's marker (or the counter's last change) to the first "
            "callback's arrival; jobs finalized by the watcher waited for a killed worker's "
            "stall (JOB_STALL_SECONDS=5, sweep every 5 s)",
        ],
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--instances", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--units", type=int, default=500, help="units per job")
    parser.add_argument(
        "--kill-rate",
        type=float,
        default=0.0,
        help="fraction of unit invocations (first deliveries) that SIGKILL their instance",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for jobs")
    parser.add_argument(
        "--backlog",
        type=int,
        default=DEFAULT_BACKLOG,
        help="enqueue units while fewer than this many are queued (0: all at once; Azurite "
        "slows down with long queues, see harness/feeding.py)",
    )


def main(args: argparse.Namespace) -> int:
    with kit.scenario_storage(args.azurite, args.app_dir):
        report = run(
            args.instances,
            args.jobs,
            args.units,
            kill_rate=args.kill_rate,
            app_module=args.app,
            app_dir=args.app_dir,
            timeout=args.timeout,
            keep=args.keep,
            log_level=args.log_level,
            backlog=args.backlog,
        )
    return kit.print_report(report, args.json, kept="its queues and blobs are kept")
