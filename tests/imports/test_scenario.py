"""The imports scenario end to end: devhost instances that all fire the nightly timer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.scenarios.imports import _max_parallel, _overlaps

ROOT = Path(__file__).resolve().parents[2]


def test_overlaps_count_pairs_of_runs_that_share_time() -> None:
    assert _overlaps([(0.0, 1.0), (1.0, 2.0), (2.5, 3.0)]) == 0  # back to back is not overlap
    assert _overlaps([(0.0, 2.0), (1.0, 3.0)]) == 1
    assert _overlaps([(0.0, 10.0), (1.0, 2.0), (3.0, 4.0)]) == 2


def test_max_parallel_is_the_most_runs_at_one_moment() -> None:
    assert _max_parallel([]) == 0
    assert _max_parallel([(0.0, 1.0), (1.0, 2.0)]) == 1
    assert _max_parallel([(0.0, 5.0), (1.0, 2.0), (1.5, 6.0), (5.5, 7.0)]) == 3


@pytest.mark.slow
def test_every_instance_fires_and_each_account_is_imported_exactly_once(
    storage_env: str, subprocess_env: dict[str, str]
) -> None:
    args = ["--instances", "3", "--accounts", "3", "--rows", "200", "--fire-after", "20"]
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "scenario", "imports", *args, "--json",
         "--log-level", "WARNING"],
        env=subprocess_env, cwd=str(ROOT), capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["ok"] is True
    assert report["timer_firings"] == 3  # every instance fired the timer...
    assert report["import_invocations"] == 3  # ...and one fan-out queued one run per account
    assert report["overlapping_runs_same_account"] == 0
    for account in report["per_account"].values():
        assert (account["runs"], account["completed_runs"], account["emails"]) == (1, 1, 1)
        assert account["imported"] == account["members_in_table"] == account["expected_imported"]
        assert account["rejected"] == 200 // 50  # every 50th row is invalid on purpose
