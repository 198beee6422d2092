"""`requests` and `capacity`: counts per alternative, and the table computed from them."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from bench import alternatives, capacity, requests
from tests.support import ROOT, child_env


def test_requests_counts_every_alternative_and_only_run_once_guards_skip_duplicates(
    bench_env: str,
) -> None:
    result = requests.run(argparse.Namespace(iterations=3, hold_seconds=0.2))
    assert result["once_duplicate"] == 1
    assert result["singleton_invocation_polling"] <= 3  # acquire, fencing token, release
    assert result["singleton_invocation"] <= 4  # waiting in line: the releaser reads the line
    alts = result["alternatives"]
    assert list(alts) == list(alternatives.NAMES)
    assert alts["webjobs"]["first_run"] >= 5  # HEAD, Acquire, HEAD, Set Metadata, Release
    repeated = {name for name, row in alts.items() if row["duplicate_runs_work_again"]}
    assert repeated == {"webjobs", "tutorial", "lease_only", "none"}


def test_capacity_turns_counts_into_rates_at_the_published_limits() -> None:
    per_op = {"once_first_run": 3.0, "once_duplicate": 1.0, "singleton_invocation": 3.0}
    table = capacity.compute(per_op, instances=8)
    rates = {row["what"]: row["max_units_per_s"] for row in table["rows"]}
    assert rates["@once, one delivery per event"] == round(20_000 / 3, 1)
    assert rates["@once, every event to 8 instances (sequential duplicates)"] == 2_000.0
    assert rates["@singleton on one key (acquisitions)"] == round(500 / 3, 1)


def test_command_prints_one_json_object(bench_env: str) -> None:
    env = child_env()
    done = subprocess.run(
        [sys.executable, "-m", "bench", "requests", "--json", "--iterations", "2",
         "--hold-seconds", "0.2"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120, check=False,
    )  # fmt: skip
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stderr[-2000:]
    result = json.loads(lines[0])
    assert result["once_duplicate"] == 1
    assert done.returncode == (0 if result["targets_met"] else 1)  # the exit code is the verdict
