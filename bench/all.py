"""`python -m bench all`: every benchmark against one private Azurite, reduced to ~10 minutes.

Writes bench/results/results.json and the PNG plots beside it. The sizes below are smaller
than each benchmark's own defaults (run a benchmark alone for the full size).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import psutil

from bench import capacity, contention, failover, imports, plots, requests, scale, storm
from bench._storage import SHARED
from harness import services

RESULTS = Path(__file__).resolve().parent / "results"

#: Each benchmark's arguments in `bench all` (reduced sizes).
REDUCED: dict[str, dict[str, Any]] = {
    "requests": {"iterations": 20, "hold_seconds": 6.0},
    "storm": {"instances": 4, "events": 80, "work_ms": 20.0, "timeout": 300.0,
              "alternatives": ",".join(storm.alternatives.NAMES)},
    "failover": {"trials": 10, "once_in_progress_timeout": 20.0,
                 "cases": "ours_kill,webjobs_kill,ours_sigterm,webjobs_sigterm,once_kill"},
    "contention": {"processes": "1,4,16", "webjobs_processes": "4,16", "fair_processes": "4,16",
                   "seconds": 8.0,
                   "hold_ms": 50.0},
    "scale": {"instances": "1,2,4,8", "events": 100},
    "imports": {"rows": 2000, "per_row_rows": 300, "rtt_ms": "0,2,5", "memory_rows": "",
                "e2e_rows": 0, "lanes": 4, "memory_834_rows": "", "update_rows": 2000,
                "kill": False},
}  # fmt: skip


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default=str(RESULTS), help="folder for results.json and plots")
    parser.add_argument("--only", default="", help="comma-separated subset of the benchmarks")


def machine() -> dict[str, Any]:
    return {
        "cpu_cores": psutil.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "processor": platform.processor() or platform.machine(),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    modules = {"requests": requests, "storm": storm, "failover": failover,
               "contention": contention, "scale": scale, "imports": imports}  # fmt: skip
    wanted = [n for n in str(args.only).split(",") if n] or list(modules)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"machine": machine(), "sizes": REDUCED, "seconds": {}}
    with services.azurite() as azurite:
        os.environ[SHARED] = azurite.connection_string
        try:
            for name in wanted:
                started = time.monotonic()
                results[name] = modules[name].run(argparse.Namespace(**REDUCED[name]))
                results["seconds"][name] = round(time.monotonic() - started, 1)
        finally:
            os.environ.pop(SHARED, None)
    if "requests" in results:
        results["capacity"] = capacity.compute(
            results["requests"], REDUCED["storm"]["instances"], results.get("storm")
        )
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")  # kept if a plot fails
    results["plots"] = plots.draw_all(results, out)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    return results
