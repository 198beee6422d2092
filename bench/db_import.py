"""An account's PostgreSQL table imported beside the CSV of the same members, the database
import killed a third of the way through and resumed (`bench db_import`).

A real PostgreSQL (harness/postgres.py, Debian's package: `make postgres`) holds a table of
`rows` members (COPY); a CSV of the same members is uploaded for another account. Each import
runs in a child process of its own holding the account's lease (as the queue function would),
with the default settings (IMPORT_CHUNK_RECORDS 5,000, IMPORT_DATABASE_{A}_PAGE_ROWS 5,000):

1. the CSV import and the table's import, uninterrupted, at the same time (Azurite slows down
   as it fills: the one imported second would meet a fuller emulator), each into a member
   table of its own: `csv_rows_per_s`, `db_rows_per_s`, and `db_vs_csv` their ratio (target
   at least 0.8);
2. the database import, SIGKILLed once its checkpoint has passed a third of the rows (read
   from storage, not a sleep);
3. the database import again, in a new process: it waits for the killed holder's lease to
   expire, resumes after the last checkpointed page, and completes.

Checked from the table itself (not the import's report): every member has one row and one
"add" history row (`every_member_once`); the second process's log says where it resumed
(`resumed_after_kill`). `killed_and_resumed_rows_per_s` is the rows over both processes'
import time (the lease wait excluded; the process start and the rows redone after the last
checkpoint included). Memory: each child samples its RSS at every checkpoint;
`rss_growth_mib` is the resumed process's growth from its first quarter of checkpoints to its
end (target under 32 MiB: flat, whatever the table's size), beside each process's peak RSS.

Default 60,000 rows (a couple of minutes); the full run is `--rows 1000000`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

from harness import import_samples as samples

RUN = date(2026, 11, 22)
ROOT = Path(__file__).resolve().parent.parent
MIN_RATIO = 0.8
MAX_RSS_GROWTH_MIB = 32.0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=60_000,
                        help="members in the table and the CSV (full run: 1000000)")  # fmt: skip


def _child(mode: str, account: str) -> int:
    """`python -m bench.db_import child MODE ACCOUNT`: import under the account's lease;
    print one JSON line with the import's seconds, records and RSS samples."""
    import logging

    import psutil
    from blobsingleton import BlobLease

    from shared.imports import checkpoint
    from shared.imports.importer import run_import
    from shared.imports.request import ImportRequest

    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
    logging.getLogger("azure").setLevel(logging.WARNING)
    process = psutil.Process()
    samples_rss: list[int] = []
    real_save = checkpoint.CheckpointStore.save

    def save(self: checkpoint.CheckpointStore, state: dict[str, Any]) -> None:
        real_save(self, state)
        samples_rss.append(process.memory_info().rss)

    checkpoint.CheckpointStore.save = save  # type: ignore[method-assign]
    request = ImportRequest.nightly(account, RUN)
    with BlobLease(f"import-{account}", poll_interval=0.5) as lease:
        print(f"acquired {lease.token}", flush=True)
        started = time.monotonic()
        while True:
            report = run_import(request, lease.token, email=False, budget_s=270)
            if report.status != "continued":
                break
        seconds = time.monotonic() - started
    print(json.dumps({"mode": mode, "seconds": seconds, "records": report.records,
                      "status": report.status, "rss": samples_rss}), flush=True)  # fmt: skip
    return 0


def _spawn(env: dict[str, str], mode: str, account: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "bench.db_import", "child", mode, account],
                            env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip


def _result(output: str) -> dict[str, Any]:
    lines = [x for x in output.splitlines() if x.startswith('{"mode"')]
    if not lines:  # the child failed: say how
        raise RuntimeError("an import process ended without its result; its output ended:\n"
                           + "\n".join(output.splitlines()[-30:]))  # fmt: skip
    return dict(json.loads(lines[-1]))


def run(args: argparse.Namespace) -> dict[str, Any]:
    from bench._storage import azurite_storage

    with azurite_storage(), contextlib.ExitStack() as stack:
        return _run(args.rows, stack)


def _run(rows: int, stack: contextlib.ExitStack) -> dict[str, Any]:
    from azure.data.tables import TableServiceClient

    from bench.import_e2e import read_rows
    from harness import db_samples
    from harness import kit as _common
    from harness.postgres import postgres_server
    from shared.imports.layout import imports_container

    run_id = _common.new_run_id()
    server = stack.enter_context(postgres_server())
    url = server.create_database("bench", "bench", "bench-pw")
    started = time.monotonic()
    db_samples.create_members_table(url, samples.members(rows))
    fill_s = time.monotonic() - started
    env = {
        **os.environ,
        "IMPORTS_CONTAINER": f"imports-{run_id}", "LEASE_CONTAINER": f"locks-{run_id}",
        "RUNONCE_CONTAINER": f"runonce-{run_id}", "MEMBERS_TABLE": f"Members{run_id}",
        "IMPORT_ACCOUNTS": "", "IMPORT_REPORT_TO": "",
        "IMPORT_DATABASE_ACCOUNTS": "dbacct,dbfull", **db_samples.settings_for("dbacct", url),
        **db_samples.settings_for("dbfull", url),
    }  # fmt: skip
    os.environ.update(env)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "members.csv"
        with path.open("w", encoding="utf-8", newline="") as out:
            for line in samples.csv_lines(samples.members(rows)):
                out.write(line)
        with path.open("rb") as data:
            imports_container(create=True).upload_blob("csvacct/incoming/members.csv", data)
    # each import into a member table of its own: Azurite's tables slow down as they fill, so
    # the one imported second would otherwise be measured against a fuller table
    # the CSV and the table imported at the same time, side by side: Azurite slows down as it
    # fills (whatever the table), so the one imported second would be measured on a fuller one
    csv = _spawn({**env, "MEMBERS_TABLE": f"Csv{run_id}"}, "csv", "csvacct")
    full = _spawn({**env, "MEMBERS_TABLE": f"Db{run_id}"}, "db", "dbfull")
    csv_result = _result(csv.communicate(timeout=7200)[0])
    full_result = _result(full.communicate(timeout=7200)[0])
    # the database import, killed once its checkpoint passed a third of the rows
    first = _spawn(env, "db", "dbacct")
    container = imports_container()
    checkpoint = f"dbacct/reports/{RUN.isoformat()}/checkpoint.json"
    kill_started = time.monotonic()
    stored = 0
    while first.poll() is None:
        with contextlib.suppress(Exception):
            data = json.loads(container.download_blob(checkpoint).readall())
            stored = int((data.get("resume") or {}).get("line", 0))
        if stored >= rows // 3:
            break
        time.sleep(0.2)
    first.send_signal(signal.SIGKILL)
    first.communicate()
    first_s = time.monotonic() - kill_started
    second = _spawn(env, "db", "dbacct")
    second_out = second.communicate(timeout=7200)[0]
    second_result = _result(second_out)
    resumed = f"resuming run {RUN.isoformat()} of account dbacct at record {stored + 1}"
    table = TableServiceClient.from_connection_string(
        os.environ["AzureWebJobsStorage"]
    ).get_table_client(env["MEMBERS_TABLE"])
    members, adds, _ = read_rows(table, "dbacct", samples.members(rows))
    once = len(members) == rows and len(adds) == rows and set(adds.values()) == {1}
    killed_seconds = first_s + second_result["seconds"]
    csv_rate = rows / csv_result["seconds"]
    db_rate = rows / full_result["seconds"]
    rss = second_result["rss"]
    growth = (max(rss) - max(rss[: max(1, len(rss) // 4)])) / 2**20 if rss else 0.0
    result = {
        "rows": rows,
        "table_fill_s": round(fill_s, 1),
        "csv_seconds": round(csv_result["seconds"], 1),
        "csv_rows_per_s": round(csv_rate),
        "db_seconds": round(full_result["seconds"], 1),
        "db_rows_per_s": round(db_rate),
        "db_vs_csv": round(db_rate / csv_rate, 2),
        "killed_after_rows_checkpointed": stored,
        "killed_seconds_first_process": round(first_s, 1),
        "killed_seconds_resumed_process": round(second_result["seconds"], 1),
        "killed_and_resumed_rows_per_s": round(rows / killed_seconds),
        "every_member_once": once,
        "members_in_table": len(members),
        "resumed_after_kill": resumed in second_out,
        "rss_growth_mib": round(growth, 1),
        "peak_rss_mib": {
            "csv": _mib(csv_result["rss"]),
            "db": _mib(full_result["rss"]),
            "db_resumed": _mib(rss),
        },
    }
    result["targets_met"] = bool(
        once and result["resumed_after_kill"] and stored >= rows // 3
        and db_rate >= MIN_RATIO * csv_rate and growth < MAX_RSS_GROWTH_MIB
        and csv_result["status"] == second_result["status"] == full_result["status"]
        == "completed"
    )  # fmt: skip
    return result


def _mib(values: list[int]) -> float:
    return round(max(values) / 2**20, 1) if values else 0.0


if __name__ == "__main__":
    if sys.argv[1:2] == ["child"]:
        sys.exit(_child(sys.argv[2], sys.argv[3]))
