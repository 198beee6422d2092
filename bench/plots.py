"""The PNG plots of a `bench all` run, drawn with matplotlib from results.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt


def _save(fig: Any, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def failover_timeline(failover: dict[str, Any], path: Path) -> str:
    """Who holds the lock around a kill or a SIGTERM: holder, unowned gap, next holder."""
    cases = [c for c in ("ours_kill", "webjobs_kill", "ours_sigterm", "webjobs_sigterm",
                         "once_kill") if c in failover]  # fmt: skip
    fig, ax = plt.subplots(figsize=(9, 0.8 + 0.7 * len(cases)))
    for row, case in enumerate(cases):
        t = failover[case]["timeline"]
        stopped = t["stopped"]
        taken = sorted(t["taken_over"])
        median = taken[len(taken) // 2] - stopped
        end = max(taken[-1] - stopped, 1) + 2
        ax.broken_barh([(-2, 2)], (row - 0.3, 0.6), color="tab:blue")
        ax.broken_barh([(0, median)], (row - 0.3, 0.6), color="tab:red", alpha=0.35)
        ax.broken_barh([(median, end - median)], (row - 0.3, 0.6), color="tab:green")
        ax.plot([x - stopped for x in taken], [row] * len(taken), "k|", markersize=12)
        ax.text(median, row + 0.35, f"median {median:.1f} s", fontsize=8)
    ax.axvline(0, color="k", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(cases)), cases)
    ax.set_xlabel("seconds after SIGKILL / SIGTERM (blue: old holder, red: nobody, green: new "
                  "holder; ticks: each trial)")  # fmt: skip
    ax.set_title("Failover: time until another instance holds the key")
    return _save(fig, path)


def throughput(scale: dict[str, Any], path: Path) -> str:
    runs = scale["runs"]
    xs = [r["instances"] for r in runs]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(xs, [r["deliveries_per_s"] for r in runs], "o-", label="deliveries/s")
    ax.plot(xs, [r["events_per_s"] for r in runs], "s-", label="events/s (each to every instance)")
    ax.set_xlabel("instances")
    ax.set_ylabel("per second")
    ax.set_xticks(xs)
    cpu = ax.twinx()
    cpu.plot(
        xs, [r["azurite_cpu_share_of_wall"] for r in runs], "r^--", label="Azurite CPU (cores)"
    )
    cpu.set_ylabel("Azurite CPU, cores busy", color="tab:red")
    ax.legend(loc="upper left", fontsize=8)
    cpu.legend(loc="upper right", fontsize=8)
    ax.set_title("Notification flow: throughput against instances")
    return _save(fig, path)


def requests_per_operation(requests: dict[str, Any], path: Path) -> str:
    alts = requests["alternatives"]
    names = list(alts)
    fig, ax = plt.subplots(figsize=(8, 4))
    xs = range(len(names))
    ax.bar([x - 0.2 for x in xs], [alts[n]["first_run"] for n in names], 0.4, label="first run")
    ax.bar([x + 0.2 for x in xs], [alts[n]["duplicate"] for n in names], 0.4,
           label="duplicate (same key again)")  # fmt: skip
    for x, n in zip(xs, names, strict=True):
        if alts[n]["duplicate_runs_work_again"]:
            ax.text(x + 0.2, alts[n]["duplicate"] + 0.1, "runs\nagain", ha="center", fontsize=7)
    ax.set_xticks(list(xs), names)
    ax.set_ylabel("storage requests per operation")
    ax.legend(fontsize=8)
    ax.set_title("Requests per operation, each alternative")
    return _save(fig, path)


def storm_duplicates(storm: dict[str, Any], path: Path) -> str:
    alts = storm["alternatives"]
    names = list(alts)
    fig, ax = plt.subplots(figsize=(8, 4))
    bars = ax.bar(names, [alts[n]["duplicates"] for n in names], color="tab:orange")
    ax.bar_label(bars)
    ax.set_ylabel("duplicate emails")
    ax.set_title(f"Storm: {storm['instances']} instances x {storm['events']} events, "
                 "every event to every instance")  # fmt: skip
    return _save(fig, path)


def draw_all(results: dict[str, Any], folder: Path) -> list[str]:
    """Every plot whose benchmark is in `results`; returns the file names."""
    drawn = []
    if "failover" in results:
        drawn.append(failover_timeline(results["failover"], folder / "failover_timeline.png"))
    if "scale" in results:
        drawn.append(throughput(results["scale"], folder / "throughput_vs_instances.png"))
    if "requests" in results:
        drawn.append(
            requests_per_operation(results["requests"], folder / "requests_per_operation.png")
        )
    if "storm" in results:
        drawn.append(storm_duplicates(results["storm"], folder / "storm_duplicates.png"))
    return drawn
