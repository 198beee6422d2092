"""Fair waiting: N processes contending for one key, each holding 50 ms and asking again.

Plain polling (`BlobLease`, what WebJobs and the tutorial patterns do too) against the line
(`FairLease`, what `@singleton(busy=Busy.wait())` uses), same Azurite, same run: acquisitions
per second, per process (most / fewest), waits p50 / p99 / max, the handoff (previous release
to next start) p50 / p99, and storage requests per waiter-second. Issue 14's targets: most /
fewest <= 2 and no process below half the average; handoff p99 <= 0.5 s; polling no more than
about one request per waiter per second.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from harness import services

ROOT = Path(__file__).resolve().parent.parent


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--processes", default="2,4,8", help="comma-separated process counts")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--hold", type=float, default=0.05)


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _one(
    env: dict[str, str], processes: int, seconds: float, hold: float, fair: bool
) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix="fairness-")) / "rows.txt"
    key = f"fair-{uuid.uuid4().hex[:8]}"
    args = [sys.executable, "-m", "bench.contender", key, str(out), str(seconds), str(hold),
            "1" if fair else "0"]  # fmt: skip
    procs = [subprocess.Popen(args, env=env, cwd=ROOT) for _ in range(processes)]
    for proc in procs:
        proc.wait(seconds + 120)
    rows, requests = [], 0
    for line in out.read_text().splitlines():
        parts = line.split()
        if parts[0] == "requests":
            requests += int(parts[2])
        else:
            rows.append(parts)
    rows.sort(key=lambda r: float(r[1]))
    per_process = Counter(r[4] for r in rows)
    counts = [per_process.get(str(p.pid), 0) for p in procs]
    waits = [float(r[3]) for r in rows]
    handoffs = [float(b[1]) - float(a[2]) for a, b in itertools.pairwise(rows)]
    average = sum(counts) / max(1, len(counts))
    return {
        "processes": processes,
        "fair": fair,
        "acquisitions": len(rows),
        "acquisitions_per_s": round(len(rows) / seconds, 2),
        "per_process": sorted(counts, reverse=True),
        "most_over_fewest": round(max(counts) / max(1, min(counts)), 2),
        "fewest_over_average": round(min(counts) / max(average, 1e-9), 2),
        "wait_p50_s": round(_quantile(waits, 0.5), 3),
        "wait_p99_s": round(_quantile(waits, 0.99), 3),
        "wait_max_s": round(max(waits, default=0.0), 3),
        "handoff_p50_s": round(_quantile(handoffs, 0.5), 3),
        "handoff_p99_s": round(_quantile(handoffs, 0.99), 3),
        "requests_per_process_second": round(requests / (processes * seconds), 2),
        "median_hold_s": round(statistics.median(float(r[2]) - float(r[1]) for r in rows), 3)
        if rows
        else None,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    results = []
    with services.azurite() as azurite:
        env = dict(
            os.environ,
            AzureWebJobsStorage=azurite.connection_string,
            LEASE_CONTAINER=f"locks-{uuid.uuid4().hex[:8]}",
            PYTHONPATH=str(ROOT),
        )
        for processes in (int(p) for p in args.processes.split(",")):
            for fair in (False, True):
                results.append(_one(env, processes, args.seconds, args.hold, fair))
    fair_runs = [r for r in results if r["fair"] and r["processes"] > 1]
    return {
        "benchmark": "fairness",
        "seconds": args.seconds,
        "hold_s": args.hold,
        "runs": results,
        "targets": {"most_over_fewest": 2.0, "fewest_over_average": 0.5, "handoff_p99_s": 0.5},
        "targets_met": all(
            r["most_over_fewest"] <= 2.0
            and r["fewest_over_average"] >= 0.5
            and r["handoff_p99_s"] <= 0.5
            for r in fair_runs
        ),
        "machine_note": "absolute times are machine-dependent; compare runs of one invocation",
    }
