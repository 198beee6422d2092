"""`python -m bench.report [results.json]`: the tables of docs/performance.md, as Markdown.

The page pastes this output for one `python -m bench all` run as is, except `requests`, whose
counts it explains row by row.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.all import RESULTS


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join("" if v is None else str(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def requests_table(r: dict[str, Any]) -> str:
    rows = [["`@singleton` invocation (ours)", r["singleton_invocation"], "", ""]]
    if "singleton_invocation_polling" in r:
        rows.append(["`@singleton(fair=False)` (ours)", r["singleton_invocation_polling"], "", ""])
    for name, row in r["alternatives"].items():  # "ours" is `@once`
        again = "**yes**" if row["duplicate_runs_work_again"] else "no"
        rows.append([name, row["first_run"], row["duplicate"], again])
    return _table(["per operation", "first run", "duplicate", "duplicate runs again"], rows)


def storm_table(s: dict[str, Any]) -> str:
    alts = s["alternatives"]
    none_wall = alts.get("none", {}).get("wall_s")
    rows = [
        [name, a["emails"], a["duplicates"], a["missing"], a["latency_p50_s"], a["latency_p99_s"],
         a["blob_requests_per_event"], a["queue_requests_per_event"], a["deferrals_per_event"],
         a["wall_s"], round(a["wall_s"] / none_wall, 2) if none_wall else None]
        for name, a in alts.items()
    ]  # fmt: skip
    return _table(
        ["alternative", "emails", "duplicates", "missing", "p50 s", "p99 s", "blob req/event",
         "queue req/event", "deferrals/event", "wall s", "wall / none"],
        rows,
    )  # fmt: skip


def failover_table(f: dict[str, Any]) -> str:
    cases = [c for c in f if isinstance(f[c], dict) and "median" in f[c]]
    rows = [[c, f[c]["n"], f[c]["min"], f[c]["median"], f[c]["max"]] for c in cases]
    return _table(["case (s until another holds / sends)", "trials", "min", "median", "max"], rows)


def contention_table(c: dict[str, Any]) -> str:
    rows = [
        [kind, lvl["processes"], lvl["acquisitions_per_s"],
         f"{lvl['most_per_process']} / {lvl['fewest_per_process']}", lvl["wait_p50_s"],
         lvl["wait_p99_s"], lvl["wait_max_s"], lvl["requests_per_acquisition"],
         lvl["requests_per_waiter_second"], lvl["handoff_p50_s"], lvl["handoff_p99_s"]]
        for kind in ("ours", "ours_fair", "webjobs") for lvl in c.get(kind, [])
    ]  # fmt: skip
    return _table(
        ["lock", "processes", "acq/s", "most / fewest", "wait p50", "wait p99", "wait max",
         "req/acq", "req/waiter-s", "handoff p50", "handoff p99"],
        rows,
    )  # fmt: skip


def scale_table(s: dict[str, Any]) -> str:
    rows = [
        [r["instances"], r["events_per_s"], r["deliveries_per_s"], r["duplicates"], r["missing"],
         r["azurite_cpu_s"], r["instances_cpu_s"], r["azurite_cpu_share_of_wall"]]
        for r in s["runs"]
    ]  # fmt: skip
    return _table(
        ["instances", "events/s", "deliveries/s", "duplicates", "missing", "Azurite CPU s",
         "host + instances CPU s", "Azurite cores busy"],
        rows,
    )  # fmt: skip


def imports_table(i: dict[str, Any]) -> str:
    runs = [("loopback, direct", i["local"])] + [
        (f"{c['rtt_ms_added']:g} ms per round trip (proxy)", c) for c in i["with_rtt"]
    ]
    rows = [
        [label, c["batched"]["rows_per_s"],
         (c.get("batched_lanes") or {}).get("rows_per_s", "-"), c["per_row"]["rows_per_s"],
         c["speedup"], c["fenced_per_row"]["rows_per_s"], c["speedup_vs_fenced_per_row"]]
        for label, c in runs
    ]  # fmt: skip
    return _table(
        ["link", "batched rows/s", "batched, lanes in flight", "per-row rows/s",
         "batched / per-row", "fenced per-row rows/s", "batched / fenced per-row"],
        rows,
    )  # fmt: skip


def capacity_table(c: dict[str, Any]) -> str:
    rows = [
        [r["what"], r["requests_per_unit"], r["limit"], r["max_units_per_s"], r["then"]]
        for r in c["rows"]
    ]
    return _table(["load", "requests per unit", "limit", "units/s at the limit", "then"], rows)


def render(results: dict[str, Any]) -> str:
    parts = []
    for name, draw in (("requests", requests_table), ("storm", storm_table),
                       ("failover", failover_table), ("contention", contention_table),
                       ("scale", scale_table), ("imports", imports_table),
                       ("capacity", capacity_table)):  # fmt: skip
        for run in [n for n in results if n == name or n.startswith(f"{name}_")]:
            if isinstance(results[run], dict):
                parts.append(f"#### {run}\n\n{draw(results[run])}\n")
    return "\n".join(parts)


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS / "results.json"
    print(render(json.loads(path.read_text())))
