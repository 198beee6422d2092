"""`python -m harness chaos`: a short real run (long-only) and its option parsing."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from harness.chaos_run import RATES, parse_rates
from harness.fault_proxy import FAULT_KINDS
from harness.faults import SCHEDULED_KINDS
from tests.support import ROOT, child_env


def test_fault_rates_override_the_defaults() -> None:
    rates = parse_rates("reset=0.2,stall=0.1")
    assert (rates.reset, rates.stall, rates.latency) == (0.2, 0.1, RATES.latency)
    for bad in ("reset=x", "drop=0.1", "reset=0.9,stall=0.9"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_rates(bad)


def test_server_errors_join_the_network_faults_or_replace_every_other_fault() -> None:
    from harness.__main__ import build_parser
    from harness.chaos_run import chosen_rates

    args = build_parser().parse_args(["chaos", "--server-errors", "503=0.03,500=0.03"])
    rates = chosen_rates(args)
    assert (rates.server_busy, rates.operation_timed_out, rates.internal_error) == (
        0.03, 0.015, 0.015
    )  # fmt: skip
    assert (rates.reset, rates.stall, rates.latency) == (RATES.reset, RATES.stall, RATES.latency)
    only = build_parser().parse_args(
        ["chaos", "--server-errors", "503=0.03,500=0.03", "--only-server-errors"]
    )
    alone = chosen_rates(only)
    assert (alone.reset, alone.stall, alone.latency, alone.server_busy) == (0, 0, 0, 0.03)
    with pytest.raises(SystemExit):  # a network fault is not a server error
        build_parser().parse_args(["chaos", "--server-errors", "reset=0.1"])


@pytest.mark.long
@pytest.mark.services  # starts Azurite, a fault proxy and devhost instances itself
def test_a_short_chaos_run_injects_every_fault_and_every_invariant_holds() -> None:
    env = child_env()
    env.pop("SENDGRID_API_KEY", None)
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "chaos", "--instances", "3", "--minutes", "1.25",
         "--seed", "5", "--json", "--fault-rates", "reset=0.1,stall=0.06,latency=0.15"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, (proc.stdout, proc.stderr[-3000:])
    report = json.loads(lines[0])
    failed = [i for i in report["invariants"] if not i["held"]]
    assert proc.returncode == 0, (failed, proc.stderr[-3000:])
    assert report["ok"] and report["settled"]
    assert (report["seed"], report["instances"], report["seconds"]) == (5, 3, 75.0)
    totals = report["faults"]["totals"]
    for kind in (*SCHEDULED_KINDS, *FAULT_KINDS):
        assert totals.get(kind, 0) > 0, (kind, report["faults"])
    executed = report["faults"]["executed"]
    assert [f["kind"] for f in executed] == [f["kind"] for f in report["faults"]["scheduled"]]
    assert {i["name"] for i in report["invariants"]} and len(report["invariants"]) == 4


def test_the_summary_names_each_invariant_and_the_verdict() -> None:
    from harness.chaos_run import ChaosReport
    from harness.invariants import Invariant

    report = ChaosReport(
        seed=1, instances=2, seconds=60.0, run_id="r1",
        faults={"totals": {"kill_instance": 6, "reset": 3}},
        invariants=[Invariant("a", True, {"n": 1}, []), Invariant("b", False, {"n": 2}, [{}])],
        settled=True, settle_s=9.0, elapsed_s=70.0, workload={},
    )  # fmt: skip
    text = report.summary()
    assert "kill_instance 6, reset 3" in text
    assert "held   a: n 1" in text and "BROKEN b: n 2" in text
    assert not report.ok and text.endswith("FAILED")
    assert report.to_dict()["ok"] is False
