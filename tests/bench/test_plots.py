"""Plots are drawn as PNG files from results shaped like `bench all` writes them."""

from __future__ import annotations

from pathlib import Path

from bench import alternatives, plots


def test_every_plot_is_written(tmp_path: Path) -> None:
    timeline = {"holder_started": 0.0, "holder_holds": 1.0, "stopped": 3.0,
                "taken_over": [4.0, 5.0]}  # fmt: skip
    results = {
        "failover": {"ours_kill": {"timeline": timeline}, "ours_sigterm": {"timeline": timeline}},
        "scale": {"runs": [
            {"instances": n, "deliveries_per_s": 10.0 * n, "events_per_s": 10.0,
             "azurite_cpu_share_of_wall": 0.5} for n in (1, 2)]},
        "requests": {"alternatives": {
            n: {"first_run": 3, "duplicate": 1, "duplicate_runs_work_again": n == "none"}
            for n in alternatives.NAMES}},
        "storm": {"instances": 2, "events": 3,
                  "alternatives": {n: {"duplicates": 1} for n in alternatives.NAMES}},
    }  # fmt: skip
    drawn = plots.draw_all(results, tmp_path)
    assert len(drawn) == 4
    for name in drawn:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
