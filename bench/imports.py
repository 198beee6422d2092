"""Import throughput (batched transactions vs one request per row) and peak memory.

Targets (issue 22 section 3), in the JSON as `targets`, `target_results`, `targets_met`:
batched at least 10x one request per row at a 2 ms round trip, and at least 1,600 rows/s
(80 % of a table partition's 2,000 entities/s) there; memory flat in file size (peak RSS
of the largest file at most 1.25x that of the smallest, per kind; growth per row shown).
`--kill` runs the end-to-end import through devhost with the importing instance SIGKILLed
(import_e2e.py).

Measured against a private Azurite:
- write path, same members each way: `FencedMemberWriter` (99 members + the fenced state
  row per transaction), one transaction in flight and `--lanes` in flight, vs one
  `upsert_entity` request per member (the target's baseline), and vs one fenced transaction
  per member (1 member + the state row: same guarantees, still one request per row);
  rows/s, requests/row and this process's CPU seconds. Parsing is done beforehand so only
  the write strategy differs. With `--rtt-ms` the same comparison runs again through a TCP
  proxy (bench/latency_proxy.py) that adds that round trip at the socket (a model of the
  network to a real storage account, which a local emulator does not have).
- an import of members the account already has, at 2 ms: rows/s and member reads per row
  (the state is read a window of records at a time, one range query each).
- end to end: a whole `run_import` of one CSV (stream, parse, validate, write, move).
- rows/s and peak RSS (VmHWM) of a whole run, every invocation of it, in a child process,
  for each `--memory-rows` (CSV) and `--memory-834-rows` (X12 834) size, and for an 834
  whose one family has `--memory-family-dependents` dependents (issue 33: one subscriber
  with 64,000 of them added 118 MB; the family is now refused member by member, none
  held: flat in the family's size, the same peak_rss_growth_ratio target).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from azure.data.tables import TableServiceClient, UpdateMode

from bench._storage import azurite_storage
from bench.latency_proxy import latency_proxy
from devhost.request_counting import RequestCounter
from harness import import_samples as samples
from shared.imports.member_table import FencedMemberWriter, Provenance, member_entity
from shared.imports.records import Member
from shared.imports.validation import validate_member

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {
    "batched_vs_per_row_at_2ms": 10.0,
    "batched_rows_per_s_at_2ms": 1600.0,  # 80 % of one partition's 2,000 entities/s
    # peak RSS of the largest file over that of the smallest, per kind: flat in file size
    "peak_rss_growth_ratio": 1.25,
}
RUN = date(2026, 11, 22)
KEEP_ALIVE_S = 120


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=5000, help="rows for the write comparison")
    parser.add_argument("--per-row-rows", type=int, default=1000,
                        help="rows written one request each (slow, so fewer)")  # fmt: skip
    parser.add_argument("--rtt-ms", default="0,2",
                        help="ms per round trip the TCP proxy adds, comma-separated")  # fmt: skip
    parser.add_argument("--lanes", type=int, default=4,
                        help="transactions in flight (IMPORT_WRITE_LANES)")  # fmt: skip
    parser.add_argument("--memory-rows", default="10000,50000",
                        help="CSV sizes for rows/s and peak RSS, e.g. 100000,1000000")  # fmt: skip
    parser.add_argument("--memory-834-rows", default="1000,5000",
                        help="834 sizes (members) for the same, e.g. 100000,1000000")  # fmt: skip
    parser.add_argument("--memory-family-dependents", default="",
                        help="834s with one family this large, e.g. 10000,64000")  # fmt: skip
    parser.add_argument("--update-rows", type=int, default=5000,
                        help="rows of an import of known members at 2 ms")  # fmt: skip
    parser.add_argument(
        "--e2e-rows",
        type=int,
        default=0,
        help="rows of the end-to-end import (in this process; with --kill through devhost)",
    )
    parser.add_argument("--kill", action="store_true",
                        help="run the end-to-end import through devhost, SIGKILLing the "
                        "instance that imports mid-run (bench/import_e2e.py)")  # fmt: skip
    parser.add_argument("--e2e-kinds", default="csv,834", help="file kinds of the --kill run")
    parser.add_argument("--e2e-chunk-records", type=int, default=5000,
                        help="IMPORT_CHUNK_RECORDS of the --kill run")  # fmt: skip
    parser.add_argument("--e2e-budget-s", type=float, default=60.0,
                        help="IMPORT_INVOCATION_BUDGET_S of the --kill run")  # fmt: skip
    parser.add_argument("--e2e-instances", type=int, default=2)
    parser.add_argument("--e2e-timeout-s", type=float, default=3600.0,
                        help="give up on the --kill run after this long")  # fmt: skip


def _members(count: int, prefix: str) -> list[Member]:
    today = datetime.now(UTC).date()
    return [
        validate_member(
            {
                "member_id": m.member_id, "first_name": m.first_name, "last_name": m.last_name,
                "date_of_birth": m.date_of_birth, "plan": m.plan,
                "coverage_start": m.coverage_start, "coverage_end": m.coverage_end,
            },
            today=today,
        )
        for m in samples.members(count, prefix=prefix)
    ]  # fmt: skip


def _table(connection: str, name: str, counter: RequestCounter) -> Any:
    """A table client whose requests are counted."""
    service = TableServiceClient.from_connection_string(connection, raw_request_hook=counter)
    return service.create_table_if_not_exists(name)


def _through_proxy(connection: str, port: int) -> str:
    """`connection` with its table endpoint moved to the latency proxy's port."""
    return re.sub(r"(TableEndpoint=http://127\.0\.0\.1:)\d+", rf"\g<1>{port}", connection)


def _timed(rows: int, counter: RequestCounter, write: Any) -> dict[str, Any]:
    """Run `write()`, which writes `rows` rows; its wall and client CPU time, rows/s, requests."""
    counter.reset()
    cpu, started = time.process_time(), time.perf_counter()
    write()
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu
    return {
        "rows": rows,
        "seconds": round(elapsed, 3),
        "client_cpu_seconds": round(cpu, 3),
        "rows_per_s": round(rows / elapsed, 1),
        "requests_per_row": round(counter.total() / rows, 4),
    }


def _batched(
    table: Any,
    account: str,
    members: list[Member],
    counter: RequestCounter,
    batch_size: int = 99,
    lanes: int = 1,
) -> dict[str, Any]:
    writer = FencedMemberWriter(account, 1, "bench", table=table, batch_size=batch_size,
                                lanes=lanes)  # fmt: skip
    writer.open()

    def write() -> None:
        for i, member in enumerate(members):
            writer.add(member, Provenance("bench", "bench.csv", f"line {i + 2}"))
        writer.flush()

    try:
        return {**_timed(len(members), counter, write), "lanes": lanes}
    finally:
        writer.close()


def _per_row(
    table: Any, account: str, members: list[Member], counter: RequestCounter
) -> dict[str, Any]:
    def write() -> None:
        for i, member in enumerate(members):
            origin = Provenance("bench", "b.csv", f"line {i + 2}")
            table.upsert_entity(member_entity(account, member, 1, origin), mode=UpdateMode.REPLACE)

    return _timed(len(members), counter, write)


def _table_port(connection: str) -> int:
    found = re.search(r"TableEndpoint=http://127\.0\.0\.1:(\d+)", connection)
    assert found is not None, "an Azurite connection string with a TableEndpoint"
    return int(found.group(1))


def _compare(
    connection: str, rows: int, per_row_rows: int, rtt: float | None, tag: str, lanes: int = 4
) -> dict[str, Any]:
    """Batched vs per-row writes; `rtt` None: straight to Azurite, else through the proxy."""
    if rtt is None:
        return _compare_on(connection, rows, per_row_rows, 0.0, tag, lanes)
    with latency_proxy("127.0.0.1", _table_port(connection), rtt) as proxy_port:
        proxied = _through_proxy(connection, proxy_port)
        result = _compare_on(proxied, rows, per_row_rows, rtt, tag, lanes)
    return {**result, "through_proxy": True}


def _compare_on(
    connection: str, rows: int, per_row_rows: int, rtt: float, tag: str, lanes: int
) -> dict[str, Any]:
    counter = RequestCounter()
    table = _table(connection, f"Bench{tag}", counter)
    batched = _batched(table, f"batched{tag}", _members(rows, "B"), counter)
    in_flight = _batched(table, f"lanes{tag}", _members(rows, "L"), counter, lanes=lanes)
    per_row = _per_row(table, f"perrow{tag}", _members(per_row_rows, "P"), counter)
    fenced_per_row = _batched(table, f"fenced{tag}", _members(per_row_rows, "F"), counter,
                              batch_size=1)  # fmt: skip
    best = max(batched["rows_per_s"], in_flight["rows_per_s"])
    return {
        "rtt_ms_added": rtt * 1000,
        "batched": batched,
        "batched_lanes": in_flight,
        "per_row": per_row,
        "fenced_per_row": fenced_per_row,
        "speedup": round(best / per_row["rows_per_s"], 1),
        "speedup_one_in_flight": round(batched["rows_per_s"] / per_row["rows_per_s"], 1),
        "speedup_vs_fenced_per_row": round(best / fenced_per_row["rows_per_s"], 1),
        "batched_client_cpu_share": round(batched["client_cpu_seconds"] / batched["seconds"], 2),
    }


def _update_import(connection: str, rows: int, rtt: float) -> dict[str, Any]:
    """A whole `run_import` of a CSV of members the account already has (each record needs
    the member's stored state), table requests through the proxy at `rtt`: rows/s, and
    the member reads and transactions per row (one read per record before windows)."""
    from dataclasses import replace

    from blobsingleton import BlobLease

    from shared.imports import importer
    from shared.imports.request import ImportRequest

    account = f"upd{int(rtt * 1000)}"
    known = list(samples.members(rows, prefix="U"))
    writers: list[FencedMemberWriter] = []

    class Counted(FencedMemberWriter):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            writers.append(self)

    container = _imports_container()
    container.upload_blob(f"{account}/incoming/a.csv", samples.csv_bytes(known))
    with BlobLease(f"import-{account}") as lease:
        importer.run_import(ImportRequest.nightly(account, RUN), lease.token, email=False)
    changed = [replace(m, plan="PLATINUM") for m in known]
    container.upload_blob(f"{account}/incoming/b.csv", samples.csv_bytes(changed))
    saved = os.environ["AzureWebJobsStorage"]
    original = importer.FencedMemberWriter
    with latency_proxy("127.0.0.1", _table_port(connection), rtt) as proxy_port:
        os.environ["AzureWebJobsStorage"] = _through_proxy(connection, proxy_port)
        importer.FencedMemberWriter = Counted  # type: ignore[misc]
        try:
            with BlobLease(f"import-{account}") as lease:
                started = time.perf_counter()
                report = importer.run_import(ImportRequest.manual(account, RUN), lease.token,
                                             email=False)  # fmt: skip
                elapsed = time.perf_counter() - started
        finally:
            importer.FencedMemberWriter = original  # type: ignore[misc]
            os.environ["AzureWebJobsStorage"] = saved
    writer = writers[-1]
    return {
        "rows": rows,
        "rtt_ms_added": rtt * 1000,
        "changed": report.counted("changed"),
        "seconds": round(elapsed, 2),
        "rows_per_s": round(rows / elapsed, 1),
        "member_reads_per_row": round(writer.reads / rows, 4),
        "transactions_per_row": round(writer.transactions / rows, 4),
        "lanes": writer.lanes,
    }


def _imports_container() -> Any:
    from shared.imports.layout import imports_container

    return imports_container(create=True)


def _end_to_end(rows: int) -> dict[str, Any]:
    """A whole `run_import` of one CSV of `rows` rows, in this process."""
    from blobsingleton import BlobLease

    from shared.imports.importer import run_import
    from shared.imports.layout import imports_container
    from shared.imports.request import ImportRequest

    account = f"e2e{rows}"
    data = samples.csv_bytes(samples.members(rows))
    imports_container(create=True).upload_blob(f"{account}/incoming/a.csv", data)
    with BlobLease(f"import-{account}") as lease:
        started = time.perf_counter()
        report = run_import(ImportRequest.nightly(account, RUN), lease.token, email=False)
        elapsed = time.perf_counter() - started
    return {
        "rows": rows,
        "file_bytes": len(data),
        "imported": report.imported,
        "seconds": round(elapsed, 2),
        "rows_per_s": round(rows / elapsed, 1),
        "within_10_min_function_timeout": elapsed < 600,
    }


def _child(rows: int, connection: str, kind: str = "csv") -> dict[str, Any]:
    """Import a `kind` file of `rows` members in a fresh process (every invocation of the
    run, one after another, as the queue would run them); its rows/s and peak RSS.

    The file is generated (streamed to a temporary file) and uploaded here, so the child's
    peaks are the import's alone."""
    import tempfile

    from bench.import_e2e import csv_file, edi_family_file, edi_file

    account = f"mem{kind.replace('834', 'edi')}{rows}"
    name = "a.csv" if kind == "csv" else "a.834"
    with tempfile.TemporaryDirectory(prefix="bench-mem-") as folder:
        path = Path(folder) / name
        if kind == "csv":
            size = csv_file(path, rows)
        elif kind == "834-family":
            size = edi_family_file(path, rows)
        else:
            size = edi_file(path, rows)
        with path.open("rb") as data:
            _imports_container().upload_blob(f"{account}/incoming/{name}", data, length=size,
                                             max_concurrency=4)  # fmt: skip
    env = dict(os.environ, AzureWebJobsStorage=connection, PYTHONPATH=str(ROOT))
    if kind == "834-family":  # the family refused member by member, not stopped at the cap
        env.update(IMPORT_MAX_REJECTS=str(rows + 10), IMPORT_MAX_REJECT_BYTES=str(1024**3))
    done = subprocess.run(
        [sys.executable, "-m", "bench.imports", "memory-child", str(rows), account],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=6 * 3600, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"memory child failed: {done.stderr[-2000:]}")
    return {"kind": kind, **json.loads(done.stdout.strip().splitlines()[-1])}


def _peak_rss() -> int:
    """This process's peak resident set size: VmHWM on Linux, else the current RSS.

    Not `ru_maxrss`: after fork it can report the parent's size (the counter survives exec).
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    import psutil

    return int(psutil.Process().memory_info().rss)


def _memory_child(rows: int, account: str) -> None:
    """Child side: run the import invocation after invocation (each with its own lease, as
    the queue would) until it completes; print rows/s and the peaks as JSON."""
    from blobsingleton import BlobLease

    from shared.imports.importer import run_import
    from shared.imports.request import ImportRequest

    invocations = 0
    started = time.perf_counter()
    while True:
        with BlobLease(f"import-{account}") as lease:
            report = run_import(ImportRequest.nightly(account, RUN), lease.token, email=False)
        invocations += 1
        if report.status != "continued":
            break
    elapsed = time.perf_counter() - started
    print(json.dumps({
        "rows": rows,
        "imported": report.imported,
        "file_bytes": report.files[-1].bytes if report.files else 0,
        "invocations": invocations,
        "seconds": round(elapsed, 2),
        "rows_per_s": round(rows / elapsed, 1),
        "peak_rss_bytes": _peak_rss(),
    }))  # fmt: skip


def _growth(runs: list[dict[str, Any]]) -> float | None:
    """Peak RSS growth per row from the smallest to the largest run (None: fewer than 2)."""
    if len(runs) < 2:
        return None
    small, large = runs[0], runs[-1]
    growth = large["peak_rss_bytes"] - small["peak_rss_bytes"]
    return round(growth / (large["rows"] - small["rows"]), 2)


def run(args: argparse.Namespace) -> dict[str, Any]:
    def option(name: str, default: Any) -> Any:
        return getattr(args, name, default)

    lanes = int(option("lanes", 4))
    sizes = {
        "csv": [int(x) for x in str(option("memory_rows", "")).split(",") if x.strip()],
        "834": [int(x) for x in str(option("memory_834_rows", "")).split(",") if x.strip()],
        "834-family": [
            int(x) for x in str(option("memory_family_dependents", "")).split(",") if x.strip()
        ],
    }
    # idle connections kept 120 s, not Azurite's 5: on a loaded machine a lane idle for 5 s
    # met the emulator closing it, and a reset $batch (a POST) is not retried
    with azurite_storage(in_memory=True, keep_alive_s=KEEP_ALIVE_S) as connection:
        os.environ["IMPORTS_CONTAINER"] = "bench-imports"
        os.environ["MEMBERS_TABLE"] = "BenchMembers"
        os.environ["LEASE_CONTAINER"] = "bench-locks"
        result: dict[str, Any] = {
            "local": _compare(connection, args.rows, args.per_row_rows, None, "Local", lanes),
        }
        delays = [float(ms) for ms in str(args.rtt_ms).split(",") if ms.strip()]
        result["with_rtt"] = [
            _compare(connection, args.rows, args.per_row_rows, ms / 1000, f"Rtt{i}", lanes)
            for i, ms in enumerate(delays)
        ]
        if int(option("update_rows", 0)):
            result["update_import_at_2ms"] = _update_import(connection, args.update_rows, 0.002)
        if args.e2e_rows and option("kill", False):
            from bench.import_e2e import run_one

            result["end_to_end_killed"] = [
                run_one(kind, args.e2e_rows, instances=args.e2e_instances,
                        chunk_records=args.e2e_chunk_records, budget_s=args.e2e_budget_s,
                        timeout=float(option("e2e_timeout_s", 3600.0)))
                for kind in str(args.e2e_kinds).split(",") if kind.strip()
            ]  # fmt: skip
        elif args.e2e_rows:
            result["end_to_end"] = _end_to_end(args.e2e_rows)
        memory = {kind: [_child(n, connection, kind) for n in ns] for kind, ns in sizes.items()}
    result["memory"] = memory
    growth = {kind: _growth(runs) for kind, runs in memory.items() if len(runs) >= 2}
    result["memory_growth_bytes_per_row"] = growth
    ratios = {
        kind: round(runs[-1]["peak_rss_bytes"] / runs[0]["peak_rss_bytes"], 3)
        for kind, runs in memory.items()
        if len(runs) >= 2
    }
    result["peak_rss_growth_ratio"] = ratios
    at_2ms = next((c for c in result["with_rtt"] if c["rtt_ms_added"] == 2.0), None)
    checks: dict[str, bool | None] = {
        "batched_vs_per_row_at_2ms": None if at_2ms is None
        else at_2ms["speedup"] >= TARGETS["batched_vs_per_row_at_2ms"],
        "batched_rows_per_s_at_2ms": None if at_2ms is None
        else max(at_2ms["batched"]["rows_per_s"], at_2ms["batched_lanes"]["rows_per_s"])
        >= TARGETS["batched_rows_per_s_at_2ms"],
        "peak_rss_growth_ratio": None if not ratios
        else all(r <= TARGETS["peak_rss_growth_ratio"] for r in ratios.values()),
    }  # fmt: skip
    if "end_to_end_killed" in result:
        checks["end_to_end_killed"] = all(r["targets_met"] for r in result["end_to_end_killed"])
    result["targets"] = {**TARGETS, **({"end_to_end_killed": True}
                                       if "end_to_end_killed" in checks else {})}  # fmt: skip
    result["target_results"] = checks
    measured = [v for v in checks.values() if v is not None]
    result["targets_met"] = bool(measured) and all(measured)
    result["not_measured"] = [k for k, v in checks.items() if v is None]
    return result


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "memory-child":
    _memory_child(int(sys.argv[2]), sys.argv[3])
