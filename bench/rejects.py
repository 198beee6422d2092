"""What junk costs the import: bytes written and CPU per byte of junk read, under the caps.

`python -m bench rejects`: each file below is imported alone (in this process, on the run's
Azurite, default caps IMPORT_MAX_REJECTS / IMPORT_MAX_REJECT_BYTES unless --max-rejects)
and measured: the rejects and their bytes, every byte the import wrote for it (rejected
file, acknowledgments, reason, report, checkpoints: the moved file itself not counted), and
this process's CPU seconds. The junk (`harness.import_samples`): CSV of `a` lines at two
sizes ten times apart (the issue's probe: 2 MB made 1,000,000 rejects and 146 MB), an
unterminated quote, lines of quotes; an 834 of junk member loops in a good envelope, and
one of noise after an ISA. A valid file of each kind is the CPU yardstick.

Targets (`targets_met`): every junk file's writes at most WRITE_RATIO times its size; its
rejects within the caps; the larger `a` file writes no more than the smaller one (the cost
stops growing with the junk); junk CPU per MB at most CPU_RATIO times a valid file's of the
same kind, in the same run.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from collections.abc import Callable
from datetime import date
from typing import Any

from harness import import_samples as samples

#: Junk may write at most this many times its own size (all blobs of its import).
WRITE_RATIO = 2.0
#: Junk may cost at most this many times a valid file's CPU per MB of the same kind.
CPU_RATIO = 2.0
MIB = 1024**2

JUNK: dict[str, tuple[str, Callable[[int], bytes], int]] = {
    "csv_short_lines": ("csv", samples.junk_csv_short_lines, 2 * MIB),
    "csv_short_lines_x10": ("csv", samples.junk_csv_short_lines, 20 * MIB),
    "csv_unterminated_quote": ("csv", samples.junk_csv_unterminated_quote, 4 * MIB),
    "csv_quotes": ("csv", samples.junk_csv_quotes, 4 * MIB),
    "834_junk_loops": ("834", samples.junk_834_loops, 2 * MIB),
    "834_noise": ("834", samples.junk_834_noise, 1 * MIB),
}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-rejects", type=int, default=None, help="IMPORT_MAX_REJECTS (default: the app's)"
    )
    parser.add_argument(
        "--valid-rows", type=int, default=5000, help="members in each valid yardstick file"
    )


def _valid(kind: str, rows: int) -> bytes:
    members = list(samples.members(rows))
    return samples.csv_bytes(members) if kind == "csv" else samples.edi_bytes(members)


def _import_one(name: str, data: bytes) -> dict[str, Any]:
    from shared.imports.importer import run_import
    from shared.imports.layout import imports_container
    from shared.imports.request import ImportRequest

    account = f"b{uuid.uuid4().hex[:8]}"
    container = imports_container(create=True)
    container.upload_blob(f"{account}/incoming/{name}", data)
    request = ImportRequest.nightly(account, date(2026, 11, 22))
    cpu, token, invocations = time.process_time(), 1, 0
    while True:
        report = run_import(request, token, email=False)
        invocations += 1
        if report.status != "continued":
            break
        token += 1
    cpu = time.process_time() - cpu
    (found,) = report.to_dict()["files"]
    blobs = {b.name: int(b.size or 0) for b in container.list_blobs(name_starts_with=account)}
    moved = {n for n in blobs if n.endswith(f"/{name}")}
    written = sum(size for n, size in blobs.items() if n not in moved)
    rejected = sum(size for n, size in blobs.items() if n.endswith(".rejected.jsonl"))
    acks = sum(size for n, size in blobs.items() if "/acks/" in n)
    return {
        "input_bytes": len(data),
        "status": found["status"],
        "records": found["records"],
        "rejected": found["rejected"],
        "reject_bytes": rejected,
        "ack_bytes": acks,
        "written_bytes": written,
        "written_per_input_byte": round(written / len(data), 3),
        "cpu_s": round(cpu, 2),
        "cpu_s_per_mb": round(cpu / (len(data) / MIB), 3),
        "invocations": invocations,
        "error": (found["error"] or "")[:160],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from bench._storage import azurite_storage

    with azurite_storage(in_memory=True):
        os.environ.update({"IMPORTS_CONTAINER": f"bench-rejects-{uuid.uuid4().hex[:6]}",
                           "MEMBERS_TABLE": f"BenchRejects{uuid.uuid4().hex[:6]}"})  # fmt: skip
        if args.max_rejects:
            os.environ["IMPORT_MAX_REJECTS"] = str(args.max_rejects)
        from shared.imports.config import ImportSettings

        caps = ImportSettings.from_env()
        valid = {kind: _import_one(f"valid.{kind}", _valid(kind, args.valid_rows))
                 for kind in ("csv", "834")}  # fmt: skip
        junk = {name: _import_one(f"{name}.{kind}", make(size))
                for name, (kind, make, size) in JUNK.items()}  # fmt: skip
    checks: dict[str, bool] = {}
    for name, found in junk.items():
        kind = JUNK[name][0]
        checks[f"{name}: written <= {WRITE_RATIO}x input"] = (
            found["written_per_input_byte"] <= WRITE_RATIO
        )
        checks[f"{name}: rejects within the caps"] = (
            found["rejected"] <= caps.max_rejects and found["reject_bytes"] <= caps.max_reject_bytes
        )
        checks[f"{name}: CPU/MB <= {CPU_RATIO}x a valid {kind}'s"] = (
            found["cpu_s_per_mb"] <= CPU_RATIO * valid[kind]["cpu_s_per_mb"]
        )
    checks["ten times the junk, no more written"] = (
        junk["csv_short_lines_x10"]["written_bytes"] <= junk["csv_short_lines"]["written_bytes"]
        * 1.05
    )  # fmt: skip
    return {
        "benchmark": "rejects",
        "caps": {"max_rejects": caps.max_rejects, "max_reject_bytes": caps.max_reject_bytes},
        "valid": valid,
        "junk": junk,
        "checks": checks,
        "targets_met": all(checks.values()),
    }
