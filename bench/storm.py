"""Storm: N instances, every event delivered to every instance, each alternative side by side.

Each instance is a process, warmed up as a running host is (`_warm_up`), reading its own queue
(one subscription per instance), fetching messages as the host does (batches of 16, the next
once in-flight falls to 8), guarding the "email" (a 20 ms sleep, recorded with its time) with
one alternative. Busy deliveries are re-queued with a 5 s delay, as the host's deferral does
(ours holds a busy delivery in its process first, the busy policy's `hold`, so only one still busy
after the hold is re-queued). Reported per alternative: duplicates and missing emails,
enqueue->email p50/p99, queue and blob requests per event (counted at each client's HTTP
pipeline), deferrals per event, the instances' CPU per event (all their threads), wall time and
its ratio to the unguarded run in the same invocation, and each of issue 22's targets checked
(`targets_checked`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from azure.core.exceptions import ResourceExistsError

from bench import alternatives
from bench._storage import azurite_storage, counted_account, percentile, wait_for_idle_storage
from devhost.host_config import QueueOptions
from devhost.request_counting import RequestCounter

#: The host's queue batching on a one-vCPU Consumption instance: batches of 16, the next
#: fetched once in-flight messages fall to 8 (newBatchThreshold = batchSize / 2 x vCPUs).
QUEUE = QueueOptions(batch_size=16, new_batch_threshold=8)
DEFER_SECONDS = 5
#: Issue 22's storm targets. The wall-time ratio is judged at 8 instances and more (one
#: instance has no duplicates to settle: there the guard's two writes are all it adds); the
#: request budget is 4 per event for one instance, 10 for more; latency is judged against the
#: Powertools-style alternative when it ran in the same invocation.
TARGETS = {
    "ours_duplicates": 0,
    "ours_missing": 0,
    "wall_vs_unguarded": 1.5,
    "wall_judged_from_instances": 8,
    "ours_blob_requests_per_event": 10,
    "ours_blob_requests_per_event_one_instance": 4,
    "latency_p50_vs_powertools": 1.5,
    # Issue 40: at one instance the first call's p50 at most Powertools-style's (median round);
    # from 8 instances, client CPU per event at most 1.3x unguarded's.
    "latency_p50_vs_powertools_one_instance": 1.0,
    "client_cpu_vs_unguarded": 1.3,
}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--instances", type=int, default=8)
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--work-ms", type=float, default=20.0, help="time one email takes")
    parser.add_argument(
        "--alternatives", default=",".join(alternatives.NAMES), help="comma-separated subset"
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="per alternative")
    parser.add_argument(
        "--rounds", type=int, default=1,
        help="run every alternative this many times, interleaved; report the median round",
    )  # fmt: skip
    parser.add_argument(
        "--defer-seconds", type=float, default=DEFER_SECONDS,
        help="delay of a re-queued busy delivery (Busy.DEFER's default is 5 s)",
    )  # fmt: skip


class _InFlight:
    """Messages being handled in one instance, and how many of them were deferred."""

    def __init__(self) -> None:
        self.count = self.deferrals = 0
        self._changed = threading.Condition()

    def add(self, n: int) -> None:
        with self._changed:
            self.count += n

    def finished(self, handled: Future[bool]) -> None:
        with self._changed:
            self.count -= 1
            self.deferrals += int(handled.result())
            self._changed.notify_all()

    def wait_until_at_most(self, n: int) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self.count <= n)


def _warm_up(guard: alternatives.Alternative, pool: ThreadPoolExecutor, queue_client: Any) -> None:
    """What a host that has been running a while has done before the storm: its threads
    started, connections open, each library's per-process setup made. One guarded no-op per
    pool thread, on keys of this process only (not counted: the counters restart after)."""
    queue_client.get_queue_properties()
    keys = [f"warm-up-{os.getpid()}-{i}" for i in range(QUEUE.max_concurrency)]
    list(pool.map(lambda key: guard.handle(key, lambda: None), keys))


def _instance(
    name: str, queue: str, container: str, work_s: float, defer_s: float,
    ready: Any, go: Any, stop: Any, out: Any,
) -> None:  # fmt: skip
    """One instance: receive, guard, send, delete or defer, until told to stop."""
    blob_counter, queue_counter = RequestCounter(), RequestCounter()
    blobs = counted_account(blob_counter).blob_service().get_container_client(container)
    queue_client = counted_account(queue_counter).queue_service().get_queue_client(queue)
    guard = alternatives.make(name, blobs)
    sent: list[tuple[str, float, float]] = []

    def handle(message: Any) -> bool:
        body = json.loads(message.content)

        def email() -> None:
            time.sleep(work_s)
            sent.append((body["event_id"], body["enqueued_at"], time.time()))

        outcome = guard.handle(body["event_id"], email)
        if outcome == alternatives.Outcome.DEFERRED:
            queue_client.update_message(message, visibility_timeout=round(defer_s))
            return True
        queue_client.delete_message(message)
        return False

    pool = ThreadPoolExecutor(QUEUE.max_concurrency)
    _warm_up(guard, pool, queue_client)
    blob_counter.reset()
    queue_counter.reset()
    ready.set()
    go.wait()
    cpu_started = time.process_time()
    flight = _InFlight()

    idle_sleep = 0.05
    with pool:
        while not stop.is_set():
            flight.wait_until_at_most(QUEUE.new_batch_threshold)  # then the host fetches
            pages = queue_client.receive_messages(
                messages_per_page=QUEUE.batch_size, visibility_timeout=60
            ).by_page()
            try:
                batch = list(next(pages))
            except StopIteration:  # an empty queue ends the pager at once
                batch = []
            if not batch:
                time.sleep(idle_sleep)
                idle_sleep = min(idle_sleep * 2, 1.0)
                continue
            idle_sleep = 0.05
            flight.add(len(batch))
            for message in batch:
                pool.submit(handle, message).add_done_callback(flight.finished)
    flight.wait_until_at_most(0)  # every handled message counted before the report
    out.put(
        {
            "sent": sent,
            "deferrals": flight.deferrals,
            "blob_requests": blob_counter.total(),
            "queue_requests": queue_counter.total(),
            "blob_by_method": blob_counter.by_method(),
            "cpu_s": time.process_time() - cpu_started,
        }
    )


def _storm(
    name: str, instances: int, events: int, work_s: float, timeout: float, defer_s: float
) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    queues = [f"storm-{run}-{i}" for i in range(instances)]
    container = f"storm-{run}"
    setup = counted_account(RequestCounter())
    with contextlib.suppress(ResourceExistsError):
        setup.blob_service().create_container(container)
    clients = [setup.queue_service().get_queue_client(q) for q in queues]
    for client in clients:
        client.create_queue()
    ctx = mp.get_context("spawn")
    ready = [ctx.Event() for _ in range(instances)]
    go, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(
            target=_instance,
            args=(name, q, container, work_s, defer_s, ready[i], go, stop, out),
            daemon=True,
        )
        for i, q in enumerate(queues)
    ]
    for proc in procs:
        proc.start()
    for event in ready:
        event.wait(120)
    idle_wait = wait_for_idle_storage()  # the previous run's deletes, done
    started = time.monotonic()

    def enqueue(client: Any) -> None:
        for n in range(events):
            body = {"event_id": f"evt-{n:06d}", "enqueued_at": time.time()}
            client.send_message(json.dumps(body))

    go.set()
    with ThreadPoolExecutor(len(clients)) as pool:
        list(pool.map(enqueue, clients))
    drained = False
    while time.monotonic() - started < timeout:
        depth = sum(int(c.get_queue_properties().approximate_message_count or 0) for c in clients)
        if depth == 0:
            drained = True
            break
        if not all(proc.is_alive() for proc in procs):
            raise RuntimeError(f"a {name} storm instance died: {[p.exitcode for p in procs]}")
        time.sleep(0.25)
    elapsed = time.monotonic() - started
    stop.set()
    reports = [out.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(30)
    for client in clients:
        client.delete_queue()
    setup.blob_service().delete_container(container)
    emails = [e for r in reports for e in r["sent"]]
    per_event = Counter(e[0] for e in emails)
    latencies = [sent_at - enqueued_at for _, enqueued_at, sent_at in emails]
    methods: Counter[str] = Counter()
    for r in reports:
        methods.update(r["blob_by_method"])
    return {
        "emails": len(emails),
        "duplicates": len(emails) - len(per_event),
        "missing": events - len(per_event),
        "latency_p50_s": _r(percentile(latencies, 50)),
        "latency_p99_s": _r(percentile(latencies, 99)),
        "blob_requests_per_event": round(sum(r["blob_requests"] for r in reports) / events, 2),
        "queue_requests_per_event": round(sum(r["queue_requests"] for r in reports) / events, 2),
        "blob_requests_per_event_by_method": {
            m: round(c / events, 2) for m, c in sorted(methods.items())
        },
        "deferrals_per_event": round(sum(r["deferrals"] for r in reports) / events, 3),
        "client_cpu_ms_per_event": round(sum(r["cpu_s"] for r in reports) / events * 1000, 2),
        "wall_s": round(elapsed, 2),
        "drained": drained,
        "waited_for_idle_storage_s": round(idle_wait, 2),
    }


def _checks(result: dict[str, Any], ours: dict[str, Any], instances: int) -> dict[str, bool]:
    """Each target that applies to this run, and whether it was met."""
    budget = TARGETS[
        "ours_blob_requests_per_event_one_instance" if instances == 1
        else "ours_blob_requests_per_event"
    ]  # fmt: skip
    checks = {
        "no_duplicates": ours["duplicates"] == TARGETS["ours_duplicates"],
        "none_missing": ours["missing"] == TARGETS["ours_missing"],
        "blob_requests_per_event": ours["blob_requests_per_event"] <= budget,
    }
    if instances >= TARGETS["wall_judged_from_instances"] and "ours_wall_vs_unguarded" in result:
        checks["wall_vs_unguarded"] = (
            result["ours_wall_vs_unguarded"] <= TARGETS["wall_vs_unguarded"]
        )
    if "ours_latency_p50_vs_powertools" in result:
        latency = "latency_p50_vs_powertools" + ("_one_instance" if instances == 1 else "")
        checks[latency] = result["ours_latency_p50_vs_powertools"] <= TARGETS[latency]
    judged = instances >= TARGETS["wall_judged_from_instances"]
    if judged and "ours_client_cpu_vs_unguarded" in result:
        checks["client_cpu_vs_unguarded"] = (
            result["ours_client_cpu_vs_unguarded"] <= TARGETS["client_cpu_vs_unguarded"]
        )
    return checks


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _round(args: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    """Every alternative once, in the order given, and the ratios between them."""
    results = {
        name: _storm(
            name,
            args.instances,
            args.events,
            args.work_ms / 1000,
            args.timeout,
            getattr(args, "defer_seconds", DEFER_SECONDS),
        )
        for name in names
    }
    ratios: dict[str, float] = {}
    if "ours" in results and "none" in results:
        ratio = results["ours"]["wall_s"] / max(results["none"]["wall_s"], 0.001)
        ratios["ours_wall_vs_unguarded"] = round(ratio, 2)
        cpu = results["ours"]["client_cpu_ms_per_event"] / max(
            results["none"]["client_cpu_ms_per_event"], 0.001
        )
        ratios["ours_client_cpu_vs_unguarded"] = round(cpu, 2)
    if "ours" in results and "powertools" in results:
        ratio = (results["ours"]["latency_p50_s"] or 0) / max(
            results["powertools"]["latency_p50_s"] or 0, 0.001
        )
        ratios["ours_latency_p50_vs_powertools"] = round(ratio, 2)
    return {"alternatives": results, **ratios}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """`--rounds` > 1: every alternative once per round, each round starting one further along
    the list, so none always runs first; the round with the median latency ratio is reported
    whole, and every round must have sent each event once."""
    names = [n.strip() for n in str(args.alternatives).split(",") if n.strip()]
    rounds_wanted = max(1, int(getattr(args, "rounds", 1)))
    with azurite_storage():
        os.environ.setdefault("RUNONCE_CONTAINER", "runonce")
        rotations = [i % len(names) for i in range(rounds_wanted)]
        rounds = [_round(args, names[i:] + names[:i]) for i in rotations]
    order = sorted(rounds, key=lambda r: r.get("ours_latency_p50_vs_powertools", 0.0))
    median = order[(len(order) - 1) // 2]
    result: dict[str, Any] = {
        "instances": args.instances,
        "events": args.events,
        "work_ms": args.work_ms,
        "defer_seconds": getattr(args, "defer_seconds", DEFER_SECONDS),
        "alternatives": {name: median["alternatives"][name] for name in names},
    }
    result.update({k: v for k, v in median.items() if k != "alternatives"})
    if rounds_wanted > 1:
        result["rounds"] = [
            {k: v for k, v in r.items() if k != "alternatives"}
            | {"ours_duplicates": r["alternatives"].get("ours", {}).get("duplicates"),
               "ours_missing": r["alternatives"].get("ours", {}).get("missing")}
            for r in rounds
        ]  # fmt: skip
    if "ours" in names:
        worst = {
            "duplicates": max(r["alternatives"]["ours"]["duplicates"] for r in rounds),
            "missing": max(r["alternatives"]["ours"]["missing"] for r in rounds),
            "blob_requests_per_event": max(
                r["alternatives"]["ours"]["blob_requests_per_event"] for r in rounds
            ),
        }
        result["targets"] = TARGETS
        result["targets_checked"] = checks = _checks(result, worst, args.instances)
        result["targets_met"] = all(checks.values())
    return result
