"""`storm`, `failover`, `contention`, `scale`, `imports` at a tiny size: shape and invariants."""

from __future__ import annotations

import argparse

import pytest

from bench import contention, failover, imports, scale, storm


def test_storm_ours_sends_each_event_once_and_no_guard_sends_each_to_every_instance(
    bench_env: str,
) -> None:
    result = storm.run(argparse.Namespace(
        instances=2, events=6, work_ms=5.0, timeout=120.0, alternatives="ours,none",
    ))  # fmt: skip
    ours, none = result["alternatives"]["ours"], result["alternatives"]["none"]
    assert (ours["duplicates"], ours["missing"], ours["emails"]) == (0, 0, 6)
    assert (none["duplicates"], none["missing"], none["emails"]) == (6, 0, 12)
    assert none["blob_requests_per_event"] == 0
    for row in (ours, none):
        assert row["drained"]
        assert row["latency_p50_s"] <= row["latency_p99_s"]
        assert row["queue_requests_per_event"] > 0
    assert result["ours_wall_vs_unguarded"] > 0
    cpu = ours["client_cpu_ms_per_event"] / none["client_cpu_ms_per_event"]
    assert result["ours_client_cpu_vs_unguarded"] == round(cpu, 2)
    checked = result["targets_checked"]
    assert {"no_duplicates", "none_missing", "blob_requests_per_event"} <= set(checked)
    assert "wall_vs_unguarded" not in checked  # judged from 8 instances
    assert "client_cpu_vs_unguarded" not in checked  # likewise
    assert result["targets_met"] == all(checked.values())


def test_storm_rounds_report_the_median_round_and_judge_every_round(bench_env: str) -> None:
    result = storm.run(argparse.Namespace(
        instances=1, events=4, work_ms=5.0, timeout=120.0, alternatives="ours,powertools",
        rounds=3,
    ))  # fmt: skip
    rounds = result["rounds"]
    assert len(rounds) == 3
    assert all((r["ours_duplicates"], r["ours_missing"]) == (0, 0) for r in rounds)
    ratios = sorted(r["ours_latency_p50_vs_powertools"] for r in rounds)
    assert result["ours_latency_p50_vs_powertools"] == ratios[1]
    # one instance: at most Powertools-style's (issue 40)
    assert result["targets_checked"]["latency_p50_vs_powertools_one_instance"] == (ratios[1] <= 1)
    assert result["alternatives"]["ours"]["emails"] == 4


def test_failover_sigterm_hands_over_and_the_run_judges_it_against_webjobs(
    bench_env: str,
) -> None:
    """Which of the two hands over sooner is the benchmark's claim (`targets_checked`), judged
    in one run; the test holds the run's shape and what no busy machine can change: every key
    is taken over, after the stop, and before a lease left to expire could be (10 s: the lease
    was renewed at most 5 s before the stop), ten times what ours takes on an idle machine."""
    result = failover.run(argparse.Namespace(
        trials=2, once_in_progress_timeout=300.0, cases="ours_sigterm,webjobs_sigterm",
    ))  # fmt: skip
    ours, webjobs = result["ours_sigterm"], result["webjobs_sigterm"]
    assert ours["n"] == webjobs["n"] == 2
    assert 0 <= ours["min"] <= ours["median"] <= ours["max"] < failover.LEASE_S - 5.0
    assert ours["timeline"]["stopped"] <= min(ours["timeline"]["taken_over"])
    checked = result["targets_checked"]
    assert set(checked) == {"ours_sigterm", "sigterm_sooner_than_webjobs"}
    assert checked["sigterm_sooner_than_webjobs"] == (ours["median"] < webjobs["median"])
    assert result["targets_met"] == all(checked.values())


@pytest.mark.slow
def test_failover_after_sigkill_waits_for_the_lease_to_expire(bench_env: str) -> None:
    result = failover.run(argparse.Namespace(
        trials=2, once_in_progress_timeout=300.0, cases="ours_kill",
    ))  # fmt: skip
    # Not before the lease expires (10 to 15 s after the kill: renewed every 5 s); how soon
    # after is the benchmark's target, judged by `targets_met`; ten lease periods only tell
    # an expiry from a key held for good.
    kill = result["ours_kill"]
    assert 5.0 <= kill["min"] <= kill["max"] <= 10 * failover.LEASE_S
    assert result["targets_met"] == (kill["max"] <= failover.TARGETS["ours_kill_max_s"])


def test_contention_one_holder_at_a_time_and_the_line_serves_every_process(
    bench_env: str,
) -> None:
    result = contention.run(argparse.Namespace(
        processes="2", webjobs_processes="", fair_processes="2", seconds=2.0, hold_ms=50.0,
    ))  # fmt: skip
    assert result["webjobs"] == []
    for level in (*result["ours"], *result["ours_fair"]):
        assert level["processes"] == 2
        assert level["acquisitions"] >= 2
        assert level["acquisitions_per_s"] <= 1 / 0.05 + 1  # one at a time, 50 ms each
        assert level["wait_p50_s"] <= level["wait_p99_s"] <= level["wait_max_s"]
    assert result["ours_fair"][0]["fewest_per_process"] >= 1
    # Issue 22's targets for the line, checked per fair process count against polling's.
    assert result["targets"]["requests_per_acquisition_max"] == 5.0
    assert set(result["fair_checks"]["2"]) == {
        "requests_per_acquisition", "most_over_fewest", "handoff_p99", "acquisitions_per_s",
    }  # fmt: skip
    assert result["targets_met"] == all(result["fair_checks"]["2"].values())


def test_scale_runs_the_notification_flow_without_duplicates(bench_env: str) -> None:
    result = scale.run(argparse.Namespace(instances="2", events=4))
    (row,) = result["runs"]
    assert (row["instances"], row["deliveries"], row["duplicates"], row["missing"]) == (2, 8, 0, 0)
    assert row["azurite_cpu_s"] > 0 and row["instances_cpu_s"] > 0


def test_imports_batched_writes_fewer_requests_through_the_latency_proxy(bench_env: str) -> None:
    result = imports.run(argparse.Namespace(
        rows=120, per_row_rows=20, rtt_ms="5", memory_rows="", e2e_rows=0,
    ))  # fmt: skip
    (with_rtt,) = result["with_rtt"]
    assert with_rtt["through_proxy"] and with_rtt["rtt_ms_added"] == 5.0
    assert with_rtt["per_row"]["requests_per_row"] == 1.0
    assert with_rtt["batched"]["requests_per_row"] < 0.05
    # every per-row request pays the 5 ms round trip the proxy adds
    assert with_rtt["per_row"]["seconds"] >= 20 * 0.005
