"""One big import through devhost with an instance SIGKILLed mid-import (`bench imports --kill`).

For each kind (CSV, X12 834) a synthetic file of `rows` members is generated to a temporary
file (streamed: the generator never holds the file) and uploaded; one import request is
queued; `instances` devhost instances run only the import queue function, with a small
IMPORT_CHUNK_RECORDS and IMPORT_INVOCATION_BUDGET_S so the run spans invocations. Once the
run's checkpoint shows the members pass under way (an event read from storage, not a
sleep), the instance holding the account's lease is SIGKILLed; devhost respawns it, the
message comes back after DEVHOST_INVOCATION_VISIBILITY, and the run resumes from the
checkpoint. Checked afterwards, from storage and the instances' log:

    every_member_once      each member has exactly one row and one "add" history row
    no_stale_write         every row holds what the file says, and no write was refused
                           as stale (a fenced-off holder's write would be one)
    resumed_from_checkpoint  the log says "resuming run R of account A at record N / byte B"
                           with N > 0 after the kill
    invocations_under_5_min  every attempt (the killed one up to its kill) under 300 s

plus rows/s over the whole run and the peak RSS of the worker processes (VmHWM, sampled).
The rows are read from the table in contiguous RowKey ranges of about a page each, several
in flight (`read_rows`): Azurite sorts every row a query matches for each page, so reading
a partition of millions of rows page by page took hours.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import re
import signal
import tempfile
import time
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

from devhost.supervisor import HostOptions, Supervisor
from harness import import_samples as samples

ROOT = Path(__file__).resolve().parent.parent
RUN = date(2026, 11, 22)
MAX_INVOCATION_S = 300.0
_RESUMED = re.compile(r"resuming run (\S+) of account (\S+) at record (\d+) / byte (\d+)")


def csv_file(path: Path, rows: int) -> int:
    """Write a CSV of `rows` members to `path`; returns its size."""
    with path.open("w", encoding="utf-8", newline="") as out:
        for line in samples.csv_lines(samples.members(rows)):
            out.write(line)
    return path.stat().st_size


def _edi_members(rows: int) -> Iterator[str]:
    for m in samples.members(rows):
        yield from samples.edi_segments([m])[4:-1]  # the member's loop, without ST..N1 / SE


def edi_file(path: Path, rows: int, per_set: int = 10_000) -> int:
    """Write an 834 of `rows` members (transaction sets of `per_set`) to `path`; its size."""
    header = samples.edi_segments([])[:-1]  # ST, BGN, N1, N1
    isa = samples.edi_bytes([]).decode().split("~\n")[0]
    sets = 0
    with path.open("w", encoding="ascii", newline="") as out:
        out.write(isa + "~\n")
        out.write("GS*BE*SAMPLESENDER*SAMPLERECEIVER*20260101*0200*1*X*005010X220A1~\n")
        members = samples.members(rows)
        done = 0
        while done < rows or sets == 0:
            sets += 1
            count = min(per_set, rows - done)
            body = [s.replace("*0001", f"*{sets:04d}", 1) if s.startswith("ST") else s
                    for s in header]  # fmt: skip
            for m in (next(members) for _ in range(count)):
                body += samples.edi_segments([m])[4:-1]
            done += count
            body.append(f"SE*{len(body) + 1}*{sets:04d}")
            out.write("~\n".join(body) + "~\n")
        out.write(f"GE*{sets}*1~\nIEA*1*000000001~\n")
    return path.stat().st_size


def edi_family_file(path: Path, dependents: int) -> int:
    """Write an 834 whose one family has `dependents` dependents (issue 33's probe: one
    subscriber with 64,000 of them), then one more subscriber, to `path`; its size."""
    (first, last) = samples.members(2)
    header = samples.edi_segments([])[:-1]  # ST, BGN, N1, N1
    isa = samples.edi_bytes([]).decode().split("~\n")[0]
    with path.open("w", encoding="ascii", newline="") as out:
        out.write(isa + "~\n")
        out.write("GS*BE*SAMPLESENDER*SAMPLERECEIVER*20260101*0200*1*X*005010X220A1~\n")
        body = [*header, *samples.edi_segments([first])[4:-1]]
        out.write("~\n".join(body) + "~\n")
        count = len(body)
        for i in range(dependents):
            out.write(f"INS*N*19*030*XN*A*E**FT~\nREF*0F*{first.member_id}~\n"
                      f"NM1*IL*1*{first.last_name}*C{i}~\nDMG*D8*20100101*F~\n"
                      "HD*030**HLT*GOLD~\nDTP*348*D8*20260101~\n")  # fmt: skip
            count += 6
        tail = samples.edi_segments([last])[4:-1]
        out.write("~\n".join([*tail, f"SE*{count + len(tail) + 1}*0001"]) + "~\n")
        out.write("GE*1*1~\nIEA*1*000000001~\n")
    return path.stat().st_size


@functools.cache
def _import_functions() -> list[str]:
    """The app's import queue function(s) (indexed once: the app refuses a second time)."""
    from harness import kit as _common

    return _common.functions_bound_to("IMPORT_QUEUE", "function_app", str(ROOT))


def _peak_rss(pid: int | None) -> int:
    if pid is None:
        return 0
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


class _Watch:
    """Reads the run's checkpoint, report and attempts from storage."""

    def __init__(self, container: Any, account: str) -> None:
        from shared.imports.layout import Layout

        self.container = container
        self.layout = Layout(account, RUN.isoformat())

    def json(self, name: str) -> dict[str, Any] | None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            return dict(json.loads(self.container.download_blob(name).readall()))
        except ResourceNotFoundError:
            return None

    def checkpoint(self) -> dict[str, Any]:
        return self.json(self.layout.checkpoint) or {}

    def report(self) -> dict[str, Any]:
        return self.json(self.layout.report) or {}

    def attempts(self) -> list[dict[str, Any]]:
        names = [b.name for b in self.container.list_blobs(name_starts_with=self.layout.attempts)]
        return [a for a in (self.json(n) for n in names) if a is not None]


def _newest_attempt(watch: _Watch) -> dict[str, Any] | None:
    return max(watch.attempts(), key=lambda a: a.get("token", 0), default=None)


def _holder_instance(watch: _Watch, instances: int) -> tuple[int, Any] | None:
    """The devhost instance running the newest attempt and that attempt's token, if it is
    still running (devhost names its instances `devhost-{n}` in WEBSITE_INSTANCE_ID)."""
    latest = _newest_attempt(watch)
    if latest is None or latest.get("finished_at") is not None:
        return None
    number = str(latest.get("instance", "")).rsplit("-", 1)[-1]
    if not number.isdigit() or int(number) >= instances:
        return None
    return int(number), latest.get("token")


def _kill_mid_attempt(supervisor: Supervisor, watch: _Watch, instances: int) -> int | None:
    """SIGKILL the instance running the newest attempt; its number if the attempt was still
    running when the process died. With a 0.5 s invocation budget the attempt may end between
    reading it and the kill: then the kill missed the import (the instance is respawned) and
    None says to try again."""
    holder = _holder_instance(watch, instances)
    pid = supervisor.pid(holder[0]) if holder is not None else None
    if holder is None or pid is None:
        return None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while holder[0] in supervisor.alive() and supervisor.pid(holder[0]) == pid:
        assert time.monotonic() < deadline, f"instance {holder[0]} outlived SIGKILL"
        time.sleep(0.02)  # gone: nothing it sent can still be on its way after this read
    attempt = next((a for a in watch.attempts() if a.get("token") == holder[1]), {})
    return holder[0] if attempt.get("finished_at") is None else None


#: Rows per range query of the check: Azurite (LokiJS) filters the whole table and sorts
#: every row a query matches for each page it returns, so a page-by-page read of a partition
#: of 2,000,000 rows sorts millions of rows 2,000 times. Ranges of about one page each keep
#: every query's sort to one page (its filter still visits the table once).
RANGE_ROWS = 1000
_MEMBERS_END = "~"  # member keys never start with "~" (member_key escapes it)
_AFTER_OWN_ROWS = "~f"  # past "~event~..." and "~state..."; non-ASCII keys sort after it
_SELECT = ["RowKey", "MemberId", "Plan", "DateOfBirth", "Event"]


def _query(table: Any, account: str, low: str, high: str | None) -> list[dict[str, Any]]:
    """Every row of the partition with `low` <= RowKey < `high` (None: no upper bound)."""
    query = "PartitionKey eq @pk and RowKey ge @low" + (" and RowKey lt @high" if high else "")
    params = {"pk": account, "low": low, **({"high": high} if high else {})}
    pages = table.query_entities(query, parameters=params, select=_SELECT,
                                 results_per_page=RANGE_ROWS)  # fmt: skip
    return [dict(row) for row in pages]


def _member_ranges(expected: Iterator[Any]) -> list[tuple[str, str | None]]:
    """Contiguous RowKey ranges covering every key a member row can have ("" up to "~", and
    from "~f" on), split at every RANGE_ROWS-th expected member key: rows not expected
    land in some range too."""
    from shared.imports.validation import member_key

    keys = sorted(member_key(m.member_id) for m in expected)
    bounds = ["", *keys[RANGE_ROWS::RANGE_ROWS], _MEMBERS_END]
    return [*itertools.pairwise(bounds), (_AFTER_OWN_ROWS, None)]


def _event_rows(table: Any, account: str) -> tuple[list[dict[str, Any]], int]:
    """Every history row of the partition ("~event~..." up to "~f"), and the queries it took.

    Event keys are `~event~{run}~{file}~{record:010d}`: the first one gives the prefix, the
    rows before it and after its digits are read as ranges, and the digits in ranges whose
    width adapts to about RANGE_ROWS rows each (CSV records are dense, an 834's sparse)."""
    from shared.imports.member_table import EVENT_PREFIX

    first = next(iter(table.query_entities(
        "PartitionKey eq @pk and RowKey ge @low and RowKey lt @high",
        parameters={"pk": account, "low": EVENT_PREFIX, "high": _AFTER_OWN_ROWS},
        select=["RowKey"], results_per_page=1,
    ).by_page()), [])  # fmt: skip
    first_key = next((str(r["RowKey"]) for r in first), None)
    if first_key is None:
        return [], 1
    prefix = first_key.rsplit("~", 1)[0] + "~"
    rows = _query(table, account, EVENT_PREFIX, prefix)
    rows += _query(table, account, prefix + ":", _AFTER_OWN_ROWS)  # ":" sorts after "9"
    queries, low, width, low_key = 3, 0, RANGE_ROWS, prefix
    while True:
        high = low + width
        high_key = f"{prefix}{high:010d}" if high < 10**10 else prefix + ":"
        found = _query(table, account, low_key, high_key)
        rows += found
        queries += 1
        if high_key.endswith(":"):
            return rows, queries
        width = max(1, width * 2 if len(found) < RANGE_ROWS // 2 else
                    width // 2 if len(found) > RANGE_ROWS else width)  # fmt: skip
        low, low_key = high, high_key


def read_rows(
    table: Any, account: str, expected: Iterator[Any], threads: int = 4
) -> tuple[dict[str, dict[str, Any]], dict[str, int], dict[str, Any]]:
    """The account's member rows by key and its "add" history rows counted per member id,
    read from the table (not from the import's report), in contiguous RowKey ranges that
    cover the partition's member and history keys, several queries in flight."""
    from concurrent.futures import ThreadPoolExecutor

    from shared.imports.member_table import EVENT_PREFIX, is_member_row

    ranges = _member_ranges(expected)
    members: dict[str, dict[str, Any]] = {}
    adds: dict[str, int] = {}

    def take(rows: list[dict[str, Any]]) -> None:
        for row in rows:
            key = str(row["RowKey"])
            if is_member_row(key):
                members[key] = row
            elif key.startswith(EVENT_PREFIX) and row.get("Event") == "add":
                adds[str(row["MemberId"])] = adds.get(str(row["MemberId"]), 0) + 1

    with ThreadPoolExecutor(threads) as pool:
        events = pool.submit(_event_rows, table, account)
        for rows in pool.map(lambda r: _query(table, account, *r), ranges):
            take(rows)
        event_rows, event_queries = events.result()
    take(event_rows)
    stats = {"member_range_queries": len(ranges), "event_range_queries": event_queries}
    return members, adds, stats


def run_one(kind: str, rows: int, **options: Any) -> dict[str, Any]:
    """`_run_one` with this process's environment put back afterwards."""
    saved = dict(os.environ)
    try:
        return _run_one(kind, rows, **options)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _run_one(
    kind: str,
    rows: int,
    *,
    kill: bool = True,
    instances: int = 2,
    chunk_records: int = 5000,
    budget_s: float = 60.0,
    kill_after_records: int | None = None,
    timeout: float = 3600.0,
    log_level: str = "INFO",
) -> dict[str, Any]:
    """Import one `kind` ("csv" or "834") file of `rows` members through devhost."""
    from azure.data.tables import TableServiceClient

    from harness import kit as _common
    from shared.imports.fanout import enqueue_request
    from shared.imports.layout import imports_container
    from shared.imports.request import ImportRequest

    run_id = _common.new_run_id()
    account = f"big{kind.replace('834', 'edi')}"
    settings = {
        "IMPORTS_CONTAINER": f"imports-{run_id}",
        "RUNONCE_CONTAINER": f"runonce-{run_id}",
        "LEASE_CONTAINER": f"locks-{run_id}",
        "EMAIL_OUTBOX_CONTAINER": f"outbox-{run_id}",
        "IMPORT_QUEUE": f"imp-{run_id}",
        "NOTIFICATIONS_QUEUE": f"ntf-{run_id}",
        "MEMBERS_TABLE": f"Members{run_id}",
        "IMPORT_CHUNK_RECORDS": str(chunk_records),
        "IMPORT_INVOCATION_BUDGET_S": str(budget_s),
        "IMPORT_REPORT_TO": None,
        "IMPORT_ACCOUNTS": None,
        "SENDGRID_API_KEY": None,
    }
    os.environ.update({k: v for k, v in settings.items() if v is not None})
    os.environ.setdefault("DEVHOST_INVOCATION_VISIBILITY", "15")  # a killed message returns
    _common.create_containers([settings["IMPORTS_CONTAINER"] or "", settings["LEASE_CONTAINER"]
                               or "", settings["RUNONCE_CONTAINER"] or ""])  # fmt: skip
    _common.reset_queues([settings["IMPORT_QUEUE"] or "", settings["NOTIFICATIONS_QUEUE"] or ""])
    container = imports_container(create=True)
    name = "members.csv" if kind == "csv" else "enrollment.834"
    with tempfile.TemporaryDirectory(prefix="bench-import-") as folder:
        path = Path(folder) / name
        size = csv_file(path, rows) if kind == "csv" else edi_file(path, rows)
        with path.open("rb") as data:
            container.upload_blob(f"{account}/incoming/{name}", data, length=size,
                                  max_concurrency=4)  # fmt: skip
    log_file = Path(tempfile.mkdtemp(prefix="bench-import-log-")) / "instances.log"
    functions = _import_functions()
    options = HostOptions(
        instances=instances, app_module="function_app", app_dir=str(ROOT), http_port=None,
        functions=functions, settings=settings, log_level=log_level, log_file=str(log_file),
        restart=True,
    )  # fmt: skip
    watch = _Watch(container, account)
    killed: dict[str, Any] = {}
    peak_rss = 0
    threshold = kill_after_records if kill_after_records is not None else max(1, rows // 3)
    started = time.monotonic()
    with _common.running(options) as supervisor:
        enqueue_request(ImportRequest.nightly(account, RUN))
        deadline = started + timeout
        while time.monotonic() < deadline:
            peak_rss = max([peak_rss, *(_peak_rss(supervisor.pid(i)) for i in range(instances))])
            if watch.report().get("status") == "completed":
                break
            point = watch.checkpoint()
            done = int((point.get("report") or {}).get("records", 0))
            if kill and not killed and point.get("phase") == "members" and done >= threshold:
                epoch = time.time()
                victim = _kill_mid_attempt(supervisor, watch, instances)
                if victim is not None:
                    killed = {"instance": victim, "at_s": time.monotonic() - started,
                              "checkpoint_records": done, "epoch": epoch}  # fmt: skip
            time.sleep(0.1)  # polling storage for the state to act on, not waiting for it
        elapsed = time.monotonic() - started
    report = watch.report()
    attempts = watch.attempts()
    table = TableServiceClient.from_connection_string(
        os.environ["AzureWebJobsStorage"]
    ).get_table_client(settings["MEMBERS_TABLE"] or "")
    read_started = time.monotonic()
    members, adds, read_stats = read_rows(table, account, samples.members(rows))
    read_stats["seconds"] = round(time.monotonic() - read_started, 1)
    expected = {m.member_id: m for m in samples.members(rows)}
    wrong = sum(
        1 for key, m in expected.items()
        if key not in members or members[key].get("Plan") != m.plan
        or members[key].get("DateOfBirth") != m.date_of_birth
    )  # fmt: skip
    text = log_file.read_text(encoding="utf-8", errors="replace") if log_file.exists() else ""
    resumed = [
        {"run": m[1], "account": m[2], "record": int(m[3]), "byte": int(m[4])}
        for m in _RESUMED.finditer(text)
    ]
    killed_attempts = [a for a in attempts
                       if a.get("instance") == f"devhost-{killed.get('instance')}"
                       and a.get("finished_at") is None
                       and float(a["started_at"]) < killed.get("epoch", 0)]  # fmt: skip
    durations = []
    for a in attempts:
        end = a.get("finished_at") or killed.get("epoch") or time.time()
        durations.append(float(end) - float(a["started_at"]))
    results = {
        "every_member_once": len(members) == rows
        and len(adds) == rows
        and all(n == 1 for n in adds.values()),
        "no_stale_write": wrong == 0 and "stale holder" not in text,
        "resumed_from_checkpoint": (not kill) or any(r["record"] > 0 for r in resumed),
        "killed_mid_import": (not kill) or len(killed_attempts) == 1,
        "invocations_under_5_min": bool(durations) and max(durations) < MAX_INVOCATION_S,
        "completed": report.get("status") == "completed",
    }
    return {
        "kind": kind,
        "rows": rows,
        "file_bytes": size,
        "instances": instances,
        "chunk_records": chunk_records,
        "budget_s": budget_s,
        "killed": {k: v for k, v in killed.items() if k != "epoch"},
        "seconds": round(elapsed, 1),
        "rows_per_s": round(rows / elapsed, 1),
        "invocations": len(attempts),
        "longest_invocation_s": round(max(durations), 1) if durations else None,
        "resumed": resumed[:10],
        "members_in_table": len(members),
        "members_with_one_add": sum(1 for n in adds.values() if n == 1),
        "rows_not_as_in_file": wrong,
        "table_read": read_stats,
        "peak_worker_rss_bytes": peak_rss,
        "totals": {
            k: v
            for k, v in (report.get("totals") or {}).items()
            if k in ("records", "imported", "rejected", "added")
        },
        "targets": {name: True for name in results},
        "target_results": results,
        "targets_met": all(results.values()),
        "log_file": str(log_file),
    }
