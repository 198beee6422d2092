"""Fan-in of one big job: 10,000 units on 8 instances, the callback once at the end.

Measures, against its own Azurite:
- tracking_requests_per_unit: storage requests to mark and count one unit (not the last),
  counted in this process on the production code path (target <= 2);
- app_requests_per_unit: every storage request the 8 instances' app code made during the
  run (tracking, the one finalization, the archive's listing and batch deletes, watcher
  sweeps with their singleton lease), divided by the units;
- completion_latency_s: from the moment the last unit was counted to the callback's arrival
  at a local receiver (target <= 2 s);
- units_per_s: units over the time from the instances being ready to the last unit counted.
The job (record, counter, 10,000 messages) is submitted once the instances run, its
messages enqueued as the queue has room (--backlog; Azurite scans the whole queue on every
receive and delete, see harness/feeding.py).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from typing import Any

from devhost.request_counting import request_counter
from devhost.supervisor import HostOptions
from devhost.worker import apply_settings
from harness import kit as _common
from harness import services
from harness.callbacks import CallbackReceiver
from harness.feeding import DEFAULT_BACKLOG, submit_jobs
from harness.scenarios.batch import JobRun, wait_for_archives
from shared.jobs import JobRequest, JobSettings, JobStore, record_unit, submit_job

TARGETS = {"tracking_requests_per_unit": 2.0, "completion_latency_s": 2.0}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--units", type=int, default=10_000)
    parser.add_argument("--instances", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument(
        "--backlog",
        type=int,
        default=DEFAULT_BACKLOG,
        help="messages kept queued at most (Azurite scans the queue on every receive/delete)",
    )


def tracking_cost(callback_url: str, units: int = 200) -> float:
    """Requests per unit to mark and count units of a job, in this process, all but the last
    (the job's messages go to a queue of their own that no instance reads)."""
    settings = replace(JobSettings.from_env(), queue=JobSettings.from_env().queue + "-cost")
    store = JobStore(settings)
    job = {"job_id": "cost", "units": [{"id": f"c{i}"} for i in range(units)]}
    request = JobRequest.parse(json.dumps({**job, "callback_url": callback_url}), max_units=units)
    submit_job(request, store)
    request_counter.reset()
    for i in range(units - 1):
        record_unit(store, "cost", f"c{i}", units)
    cost = request_counter.total() / (units - 1)
    _common.delete_queues([settings.queue])
    return cost


def run(args: argparse.Namespace) -> dict[str, Any]:
    with services.azurite() as azurite, CallbackReceiver() as receiver:
        os.environ["AzureWebJobsStorage"] = azurite.connection_string
        app_settings = _common.use_app_settings(".")
        job_run = JobRun.new()
        job_run.prepare()
        apply_settings(job_run.settings)
        tracking = tracking_cost(receiver.url)
        job_id = f"{job_run.run_id}-fanin"
        options = HostOptions(
            instances=args.instances,
            http_port=None,
            settings={**job_run.settings, "JOB_WATCH_SCHEDULE": "*/30 * * * * *"},
            log_level=args.log_level,
        )
        with _common.running(options, app_settings) as supervisor:
            ready_at = time.time()
            feeder = submit_jobs([job_id], args.units, receiver.url, max_backlog=args.backlog)
            archived = wait_for_archives(job_run.store(), [job_id], receiver, args.timeout)
            feeder.join(30)
        totals = supervisor.totals()
    posts = receiver.by_job().get(job_id, [])
    if job_id not in archived or not posts:
        return {"error": f"job not finished in {args.timeout:.0f} s", "targets_met": False}
    completion = archived[job_id]["completion"]
    last_unit_at = float(completion["last_unit_at"])
    result: dict[str, Any] = {
        "units": args.units,
        "instances": args.instances,
        "tracking_requests_per_unit": round(tracking, 3),
        "app_requests_per_unit": round(totals.app_storage_requests / args.units, 4),
        "app_requests": totals.app_storage_requests,
        "host_requests_per_unit": round(totals.host_storage_requests / args.units, 3),
        "completion_latency_s": round(min(p.received_at for p in posts) - last_unit_at, 3),
        "units_per_s": round(args.units / max(last_unit_at - ready_at, 1e-3), 1),
        "processing_s": round(last_unit_at - ready_at, 1),
        "backlog": args.backlog,
        "callbacks": len(posts),
        "finalized_by": completion["finalized_by"],
        "invocations": totals.invocations,
    }
    result["targets"] = TARGETS
    result["targets_met"] = len(posts) == 1 and all(result[k] <= v for k, v in TARGETS.items())
    return result
