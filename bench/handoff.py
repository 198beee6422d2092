"""Lease handoff when an instance stops, on the path the Functions host takes (drain, then
kill the worker), and, for contrast, when it crashes (killed while holding the lease).

Prints, per path, the time from the holder's release to the other instance holding the key
and from the stop request; the crash path waits out the lease period (15 s).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

from harness import services
from harness.handoff import measure_handoff

POLL_INTERVAL = 1.0  # blobsingleton's default; each wait is jittered 0.5x to 1.5x
TARGETS = {"handoff_after_release_s": 1.5 * POLL_INTERVAL + 0.5}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=3, help="host-stop handoffs to time")
    parser.add_argument("--no-crash", action="store_true", help="skip the crash contrast")


def run(args: argparse.Namespace) -> dict[str, Any]:
    with services.azurite() as azurite, tempfile.TemporaryDirectory() as workdir:
        stops = [
            measure_handoff(azurite.connection_string, Path(workdir)) for _ in range(args.rounds)
        ]
        crash = (
            None
            if args.no_crash
            else measure_handoff(azurite.connection_string, Path(workdir), kill=True)
        )
    after_release = [s["handoff_after_release_s"] for s in stops]
    result: dict[str, Any] = {
        "host_stop": {
            "rounds": len(stops),
            "exit_codes": sorted({s["exit_code"] for s in stops}),
            "handoff_after_release_s": {
                "median": statistics.median(after_release),
                "max": max(after_release),
            },
            "handoff_after_stop_request_s": {
                "median": statistics.median(s["handoff_after_stop_request_s"] for s in stops),
                "max": max(s["handoff_after_stop_request_s"] for s in stops),
            },
            "invocation_hold_s": 2.0,
        },
        "crash": crash,
        "targets": TARGETS,
    }
    result["targets_met"] = max(after_release) <= TARGETS["handoff_after_release_s"]
    return result
