"""Import throughput (batched transactions vs one request per row) and peak memory.

Measured against a private Azurite:
- write path, same members each way: `FencedMemberWriter` (99 members + the fenced state
  row per transaction) vs one `upsert_entity` request per member (the target's baseline),
  and vs one fenced transaction per member (1 member + the state row: same guarantees, still
  one request per row); rows/s, requests/row and this process's CPU seconds (the client's
  share of the wall time: on loopback the batched path is bound by the Tables SDK building
  and parsing the multipart body, not by storage). Parsing is done beforehand so only the
  write strategy differs. With `--rtt-ms` the same comparison runs again through a TCP
  proxy (bench/latency_proxy.py) that adds that round trip at the socket (a model of the
  network to a real storage account, which a local emulator does not have).
- end to end: a whole `run_import` of one CSV (stream, parse, validate, write, move).
- peak memory of `run_import` in a child process for each `--memory-rows` size: Python
  allocations (tracemalloc peak; tracing slows the child, so its rows/s are not the
  throughput) and the process's max RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import tracemalloc
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from azure.data.tables import TableServiceClient, UpdateMode

from bench._storage import azurite_storage
from bench.latency_proxy import latency_proxy
from devhost.request_counting import RequestCounter
from devhost.scenarios import _import_samples as samples
from shared.imports.member_table import FencedMemberWriter, Provenance, member_entity
from shared.imports.records import Member
from shared.imports.validation import validate_member

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"batched_vs_per_row": 10.0, "memory_growth_bytes_per_row": 16.0}
RUN = date(2026, 11, 22)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=5000, help="rows for the write comparison")
    parser.add_argument("--per-row-rows", type=int, default=2000,
                        help="rows written one request each (slow, so fewer)")  # fmt: skip
    parser.add_argument("--rtt-ms", default="0,2,5",
                        help="ms per round trip the TCP proxy adds, comma-separated")  # fmt: skip
    parser.add_argument("--memory-rows", default="10000,100000",
                        help="comma-separated file sizes for the peak-memory runs")  # fmt: skip
    parser.add_argument(
        "--e2e-rows",
        type=int,
        default=100000,
        help="rows of the end-to-end import (timed without tracemalloc)",
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


def _compare(connection: str, rows: int, per_row_rows: int, rtt: float | None, tag: str) -> dict:
    """Batched vs per-row writes; `rtt` None: straight to Azurite, else through the proxy."""
    if rtt is None:
        return _compare_on(connection, rows, per_row_rows, 0.0, tag)
    port = int(re.search(r"TableEndpoint=http://127\.0\.0\.1:(\d+)", connection).group(1))  # type: ignore[union-attr]
    with latency_proxy("127.0.0.1", port, rtt) as proxy_port:
        result = _compare_on(_through_proxy(connection, proxy_port), rows, per_row_rows, rtt, tag)
    return {**result, "through_proxy": True}


def _compare_on(connection: str, rows: int, per_row_rows: int, rtt: float, tag: str) -> dict:
    counter = RequestCounter()
    table = _table(connection, f"Bench{tag}", counter)
    batched = _batched(table, f"batched{tag}", _members(rows, "B"), counter)
    per_row = _per_row(table, f"perrow{tag}", _members(per_row_rows, "P"), counter)
    fenced_per_row = _batched(table, f"fenced{tag}", _members(per_row_rows, "F"), counter,
                              batch_size=1)  # fmt: skip
    return {
        "rtt_ms_added": rtt * 1000,
        "batched": batched,
        "per_row": per_row,
        "fenced_per_row": fenced_per_row,
        "speedup": round(batched["rows_per_s"] / per_row["rows_per_s"], 1),
        "speedup_vs_fenced_per_row": round(batched["rows_per_s"] / fenced_per_row["rows_per_s"], 1),
        "batched_client_cpu_share": round(batched["client_cpu_seconds"] / batched["seconds"], 2),
    }


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


def _child(rows: int, connection: str) -> dict[str, Any]:
    """Run one import of `rows` rows in a fresh process; its peak memory is the answer.

    The file is generated and uploaded here, so the child's peaks are the import's alone.
    """
    from shared.imports.layout import imports_container

    data = samples.csv_bytes(samples.members(rows))
    imports_container(create=True).upload_blob(f"mem{rows}/incoming/a.csv", data)
    del data
    env = dict(os.environ, AzureWebJobsStorage=connection, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "bench.imports", "memory-child", str(rows)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"memory child failed: {done.stderr[-2000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


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


def _memory_child(rows: int) -> None:
    """Child side: import the uploaded CSV under the lease, print the peaks as JSON."""
    from blobsingleton import BlobLease

    from shared.imports.importer import run_import
    from shared.imports.request import ImportRequest

    account = f"mem{rows}"
    tracemalloc.start()
    with BlobLease(f"import-{account}") as lease:
        started = time.perf_counter()
        report = run_import(ImportRequest.nightly(account, RUN), lease.token, email=False)
        elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    print(json.dumps({
        "rows": rows,
        "imported": report.imported,
        "file_bytes": report.files[0].bytes,
        "seconds": round(elapsed, 2),
        "rows_per_s": round(rows / elapsed, 1),
        "tracemalloc_peak_bytes": peak,
        "peak_rss_bytes": _peak_rss(),
    }))  # fmt: skip


def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = [int(s) for s in str(args.memory_rows).split(",") if s.strip()]
    with azurite_storage() as connection:
        os.environ["IMPORTS_CONTAINER"] = "bench-imports"
        os.environ["MEMBERS_TABLE"] = "BenchMembers"
        os.environ["LEASE_CONTAINER"] = "bench-locks"
        result: dict[str, Any] = {
            "local": _compare(connection, args.rows, args.per_row_rows, None, "Local"),
        }
        delays = [float(ms) for ms in str(args.rtt_ms).split(",") if ms.strip()]
        result["with_rtt"] = [
            _compare(connection, args.rows, args.per_row_rows, ms / 1000, f"Rtt{i}")
            for i, ms in enumerate(delays)
        ]
        if args.e2e_rows and getattr(args, "kill", False):
            from bench.import_e2e import run_one

            result["end_to_end_killed"] = [
                run_one(kind, args.e2e_rows, instances=args.e2e_instances,
                        chunk_records=args.e2e_chunk_records, budget_s=args.e2e_budget_s)
                for kind in str(args.e2e_kinds).split(",") if kind.strip()
            ]  # fmt: skip
        elif args.e2e_rows:
            result["end_to_end"] = _end_to_end(args.e2e_rows)
        memory = [_child(rows, connection) for rows in sizes]
    result["memory"] = memory
    if len(memory) >= 2:
        small, large = memory[0], memory[-1]
        growth = large["tracemalloc_peak_bytes"] - small["tracemalloc_peak_bytes"]
        result["memory_growth_bytes_per_row"] = round(growth / (large["rows"] - small["rows"]), 2)
    result["targets"] = TARGETS
    result["target_results"] = {
        "batched_vs_per_row": result["local"]["speedup"] >= TARGETS["batched_vs_per_row"],
        "memory_growth_bytes_per_row": result.get("memory_growth_bytes_per_row", 0)
        <= TARGETS["memory_growth_bytes_per_row"],
    }
    result["targets_met"] = all(result["target_results"].values())
    # Not part of targets_met: the judged ratio is the loopback one, as measured.
    result["batched_vs_per_row_with_rtt"] = {
        f"{c['rtt_ms_added']:g}ms": c["speedup"] >= TARGETS["batched_vs_per_row"]
        for c in result["with_rtt"]
    }
    return result


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "memory-child":
    _memory_child(int(sys.argv[2]))
