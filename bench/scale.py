"""Scale: the notification flow (the real app on the local host) on 1, 2, 4, 8 instances.

Every event goes to every instance (the notifications scenario) and is emailed once; events/s
against instance count, with the CPU seconds Azurite used beside the CPU seconds of the
instances, to show which one is the limit on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from typing import Any

import psutil

from bench._storage import azurite_process, azurite_storage


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--instances", default="1,2,4,8", help="comma-separated counts")
    parser.add_argument("--events", type=int, default=300)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def _scenario(instances: int, events: int) -> dict[str, Any]:
    """The notifications scenario in its own process (the app is indexed once per process),
    against the run's Azurite; its instances are its children, so their CPU is counted."""
    command = [
        sys.executable, "-m", "harness", "scenario", "notifications", "--log-level", "WARNING",
        "--instances", str(instances), "--events", str(events), "--json",
    ]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, env=dict(os.environ), check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"notifications scenario failed: {done.stderr[-2000:]}")
    return json.loads(lines[-1])  # type: ignore[no-any-return]


def run(args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    with azurite_storage():
        azurite = azurite_process()
        if azurite is None:
            raise RuntimeError("no Azurite process among this process's children")
        for count in [int(n) for n in str(args.instances).split(",") if n.strip()]:
            azurite_before, ours_before = _cpu(azurite), _children_cpu()
            report = _scenario(count, args.events)
            azurite_cpu = _cpu(azurite) - azurite_before
            ours_cpu = _children_cpu() - ours_before
            rows.append({
                "instances": count,
                "events": args.events,
                "deliveries": report['deliveries'],
                "events_per_s": report['events_per_s'],
                "deliveries_per_s": round(report['deliveries'] / report['elapsed_s'], 1),
                "elapsed_s": report['elapsed_s'],
                "duplicates": report['duplicates'],
                "missing": report['missing'],
                "azurite_cpu_s": round(azurite_cpu, 2),
                "instances_cpu_s": round(ours_cpu, 2),
                "azurite_cpu_share_of_wall": round(azurite_cpu / report['elapsed_s'], 2),
            })  # fmt: skip
    return {"runs": rows, "cpu_cores": psutil.cpu_count()}
