"""A run across invocations through devhost, its instance SIGKILLed mid-import: resumed from
the checkpoint, every member once, nothing stale (bench/import_e2e.py, small sizes)."""

from __future__ import annotations

import pytest

from bench.import_e2e import run_one
from tests.support import AppSettings


@pytest.mark.parametrize("kind", ["csv", "834"])
def test_a_killed_import_resumes_from_its_checkpoint_and_imports_every_member_once(
    storage_env: str, app_settings: AppSettings, kind: str
) -> None:
    rows = 6000 if kind == "csv" else 2400  # an 834 is read twice, and slower
    result = run_one(kind, rows, instances=2, chunk_records=200, budget_s=0.5,
                     kill_after_records=600, timeout=240, log_level="INFO")  # fmt: skip
    assert result["killed"], result
    assert result["target_results"] == {
        "every_member_once": True,
        "no_stale_write": True,
        "resumed_from_checkpoint": True,
        "killed_mid_import": True,
        "invocations_under_5_min": True,
        "completed": True,
    }, result
    assert result["invocations"] > 2  # a 0.5 s budget: the run spans several invocations
    resumed = [r for r in result["resumed"] if r["record"] >= 600]
    assert resumed and resumed[0]["byte"] > 0  # after the kill: from the checkpoint, not the top
