"""The batch scenario end to end: real devhost instances, some SIGKILLed and restarted."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support import ROOT


@pytest.mark.slow
def test_batch_scenario_with_kills_calls_back_once_per_job(
    storage_env: str, subprocess_env: dict[str, str]
) -> None:
    args = ["--instances", "2", "--jobs", "3", "--units", "40", "--kill-rate", "0.05", "--json"]
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "scenario", "batch", *args, "--log-level", "WARNING"],
        env=subprocess_env,
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["ok"] is True
    assert report["jobs_archived"] == 3
    assert set(report["callbacks_per_job"].values()) <= {1, 2}
    assert report["wrong_idempotency_keys"] == 0
    assert report["units"] == 120
