"""Instances whose wall clocks disagree: duplicates and takeover times, measured.

For each skew (the second process's clock that many seconds off, either way), with real
processes against one Azurite:
- `@once` (at-least-once and at-most-once) and `@singleton`: a holder runs its work past its
  in-progress timeout while a skewed instance calls the same key: how many ran it (target 1);
- a holder is SIGKILLed: seconds until a skewed instance runs the key (target: within the
  in-progress timeout, or the lease period, plus 5 s).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench._storage import azurite_storage

ROOT = Path(__file__).resolve().parent.parent
#: The library's own test child (a process whose wall clock is off), run by path.
CHILD = str(ROOT / "packages" / "blobsingleton" / "tests" / "skew" / "skewed_child.py")
SLACK = 5.0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--skews", default="-120,120", help="seconds, comma-separated")
    parser.add_argument("--timeout", type=float, default=2.0, help="@once in_progress_timeout")
    parser.add_argument(
        "--library",
        default=str(ROOT / "packages" / "blobsingleton" / "src"),
        help="the library source to measure (e.g. an older release, for comparison)",
    )


LIBRARY: list[str] = []


def _start(offset: float, kind: str, key: str, work: float, timeout: float) -> Any:
    env = {**os.environ, "PYTHONPATH": f"{LIBRARY[0]}:{ROOT}"}
    args = [sys.executable, CHILD, str(offset), kind, key, str(work), str(timeout)]
    return subprocess.Popen(args, env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True)


def _wait_for(proc: Any, wanted: str, limit: float = 90.0) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            return False
        if line.startswith(wanted):
            return True
    return False


def _runs(kind: str, skew: float, timeout: float) -> int | None:
    """How many of the two processes ran the work (None: one of them failed)."""
    key = f"bench-skew-{uuid.uuid4().hex[:8]}"
    holder = _start(0.0, kind, key, 1.5 * timeout, timeout)
    _wait_for(holder, "ran")
    caller = _start(skew, kind, key, 0.0, timeout)
    outs = [proc.communicate(timeout=120)[0].splitlines() for proc in (caller, holder)]
    if (
        caller.returncode
        or holder.returncode
        or not all(any(line.startswith("result") for line in out) for out in outs)
    ):
        return None
    return 1 + sum(line.split()[:1] == ["ran"] for line in outs[0])  # "ran" or "ran TOKEN"


def _takeover(kind: str, skew: float, timeout: float) -> float | None:
    key = f"bench-takeover-{uuid.uuid4().hex[:8]}"
    holder = _start(0.0, kind, key, 600.0, timeout)
    _wait_for(holder, "ran")
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    killed = time.monotonic()
    taker = _start(skew, f"{kind}-wait", key, 0.0, timeout)
    took = _wait_for(taker, "ran")
    waited = time.monotonic() - killed
    taker.communicate(timeout=120)
    return round(waited, 2) if took else None


def run(args: argparse.Namespace) -> dict[str, Any]:
    skews = [float(s) for s in args.skews.split(",")]
    LIBRARY[:] = [args.library]
    runs: dict[str, dict[str, int | None]] = {}
    takeover: dict[str, dict[str, float | None]] = {}
    with azurite_storage():
        for kind in ("once-alo", "once-amo", "singleton"):
            runs[kind] = {f"{s:+g}": _runs(kind, s, args.timeout) for s in skews}
        for kind in ("once-alo", "singleton"):
            takeover[kind] = {f"{s:+g}": _takeover(kind, s, args.timeout) for s in skews}
    bounds = {"once-alo": args.timeout + SLACK, "singleton": 15.0 + SLACK}
    targets = {
        "runs_once": all(n == 1 for kind in runs.values() for n in kind.values()),
        "takeover_within_bound": all(
            w is not None and w <= bounds[kind]
            for kind, waits in takeover.items()
            for w in waits.values()
        ),
    }
    return {
        "in_progress_timeout_s": args.timeout,
        "lease_period_s": 15.0,
        "runs_per_key": runs,
        "takeover_after_kill_s": takeover,
        "takeover_bound_s": bounds,
        "targets": targets,
        "targets_met": all(targets.values()),
    }
