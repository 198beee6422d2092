"""Scenario "nightly imports": N instances all fire the nightly timer; A accounts, R rows each.

Each account gets a CSV of R rows (every 50th row invalid on purpose) and a small X12 834
file. The timer's schedule is set to fire a few seconds after the instances are up, and
every instance fires it (devhost's default `--timers every`, what a naive scale-out does).
The app must fan out once, import each account exactly once, accounts in parallel, and
email one summary per account. Each import attempt leaves an attempt log with its start
and end; the report computes overlaps between attempts of the same account (must be 0)
and how many accounts ran at the same time.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from azure.core.exceptions import ResourceNotFoundError
from azure.data.tables import TableServiceClient

from devhost.supervisor import HostOptions, Supervisor
from harness import import_samples as samples
from harness import kit as _common

NAME = "imports"
HELP = "every instance fires the nightly import timer; each account imported exactly once"

log = logging.getLogger("harness.scenario")

BAD_EVERY = 50
EDI_MEMBERS = 10
#: Accounts whose members are in a SQLite table (`--database-accounts`).
DATABASE_PREFIX = "db-"


@dataclass
class AccountResult:
    rows: int
    expected_imported: int
    imported: int = 0
    rejected: int = 0
    members_in_table: int = 0
    runs: int = 0
    completed_runs: int = 0
    overlapping_runs: int = 0
    run_s: float = 0.0
    emails: int = 0
    files_left_in_incoming: int = 0
    instances: list[str] = field(default_factory=list)
    source: str = "files"  # files (a CSV and an 834) | database (a SQLite table)


@dataclass
class ImportsReport:
    run_id: str
    instances: int
    accounts: int
    rows_per_account: int
    timer_firings: int
    import_invocations: int
    failed_invocations: int
    per_account: dict[str, AccountResult] = field(default_factory=dict)
    overlapping_runs_same_account: int = 0
    max_accounts_in_parallel: int = 0
    instances_that_imported: int = 0
    total_rows: int = 0
    import_window_s: float = 0.0
    rows_per_s: float = 0.0
    elapsed_s: float = 0.0
    finished: bool = False

    @property
    def ok(self) -> bool:
        return self.finished and self.overlapping_runs_same_account == 0 and all(
            a.runs == 1 and a.completed_runs == 1 and a.imported == a.expected_imported
            and a.members_in_table == a.expected_imported and a.emails == 1
            and a.files_left_in_incoming == 0
            for a in self.per_account.values()
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}

    def summary(self) -> str:
        lines = [
            f"imports scenario ({self.run_id}): {self.instances} instances, {self.accounts} "
            f"accounts x {self.rows_per_account} rows (+{EDI_MEMBERS} in an 834 each)",
            f"  timer firings {self.timer_firings}, import invocations {self.import_invocations}"
            f" ({self.failed_invocations} failed)",
        ]
        for name, a in sorted(self.per_account.items()):
            lines.append(
                f"  {name} ({a.source}): {a.runs} run(s), {a.imported} imported (expected "
                f"{a.expected_imported}, {a.members_in_table} in table), {a.rejected} rejected, "
                f"{a.run_s:.1f} s, {a.emails} email(s)"
            )
        lines += [
            f"  overlapping runs of one account: {self.overlapping_runs_same_account}; "
            f"accounts in parallel (max): {self.max_accounts_in_parallel}, on "
            f"{self.instances_that_imported} instance(s)",
            f"  {self.total_rows} rows in {self.import_window_s:.1f} s = {self.rows_per_s:.0f} "
            f"rows/s (whole scenario {self.elapsed_s:.1f} s)",
            "OK: each account imported exactly once" if self.ok else "FAILED",
        ]
        return "\n".join(lines)


def _overlaps(intervals: list[tuple[float, float]]) -> int:
    """Pairs of intervals that overlap in time."""
    return sum(
        1 for (s1, e1), (s2, e2) in itertools.combinations(intervals, 2) if s1 < e2 and s2 < e1
    )


def _max_parallel(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    running = best = 0
    for _, step in events:
        running += step
        best = max(best, running)
    return best


def upload_account(container: Any, number: int, account: str, rows: int) -> int:
    """Upload one account's CSV and 834; returns how many members it should import."""
    members = list(samples.members(rows, prefix=f"A{number}M", bad_every=BAD_EVERY))
    container.upload_blob(f"{account}/incoming/members.csv", samples.csv_bytes(members))
    edi = list(samples.members(EDI_MEMBERS, prefix=f"A{number}E"))
    container.upload_blob(f"{account}/incoming/enrollment.834", samples.edi_bytes(edi))
    return sum(m.valid for m in members) + EDI_MEMBERS


def database_account(
    folder: Path, account: str, number: int, rows: int
) -> tuple[int, dict[str, str]]:
    """A SQLite table of `rows` members (every BAD_EVERY-th with a bad birth date) for
    `account`, and its app settings; returns how many members it should import and them."""
    from harness import db_samples

    path = (folder / f"{account}.sqlite").resolve()
    url = f"sqlite:///{path}"
    members = list(samples.members(rows, prefix=f"D{number}M", bad_every=BAD_EVERY))
    db_samples.create_members_table(url, members, typed=False)
    return sum(m.valid for m in members), db_samples.settings_for(account, url)


def _upload(container: Any, accounts: list[str], rows: int) -> dict[str, int]:
    """Upload each account's files; returns the expected imported count per account."""
    return {
        account: upload_account(container, i, account, rows) for i, account in enumerate(accounts)
    }


def _schedule_at(moment: datetime) -> str:
    """A six-field NCRONTAB schedule firing daily at `moment` (UTC, whole seconds)."""
    return f"{moment.second} {moment.minute} {moment.hour} * * *"


def _has_report(container: Any, account: str) -> bool:
    """True once a run of the account completed (a run that continues in another
    invocation has a report too, status "continued")."""
    blobs = container.list_blobs(name_starts_with=f"{account}/reports/")
    reports = [b.name for b in blobs if b.name.endswith("/report.json")]
    return any(json.loads(container.download_blob(name).readall()).get("status") == "completed"
               for name in reports)  # fmt: skip


def _wait_for_reports(
    supervisor: Supervisor, container: Any, accounts: list[str], timeout: float
) -> bool:
    deadline = time.monotonic() + timeout
    last_log = 0.0
    while time.monotonic() < deadline:
        done = [a for a in accounts if _has_report(container, a)]
        if len(done) == len(accounts):
            return True
        if time.monotonic() - last_log > 5:
            last_log = time.monotonic()
            totals = supervisor.totals()
            log.info("%d of %d accounts imported; %d invocation(s) in flight", len(done),
                     len(accounts), totals.in_flight)  # fmt: skip
        if not supervisor.alive():
            return False
        time.sleep(0.5)
    return False


def account_result(
    container: Any, members: Any, emails: list[Any], name: str, rows: int, expected: int
) -> tuple[AccountResult, list[tuple[float, float]]]:
    """What the stores say about one account's import: its report and attempt logs, its rows
    in the member table, its summary emails; and the (start, end) of each attempt."""
    from shared.imports.member_table import is_member_row

    database = name.startswith(DATABASE_PREFIX)
    result = AccountResult(rows=rows + (0 if database else EDI_MEMBERS),
                           expected_imported=expected,
                           source="database" if database else "files")  # fmt: skip
    runs: list[tuple[float, float]] = []
    for blob in container.list_blobs(name_starts_with=f"{name}/reports/"):
        data = json.loads(container.download_blob(blob.name).readall())
        if "/attempts/" in blob.name:
            end = data["finished_at"] or time.time()  # an unfinished attempt counts as open
            runs.append((data["started_at"], end))
            result.instances.append(data["instance"])
            result.completed_runs += data["outcome"] == "completed"
        elif blob.name.endswith("/report.json"):  # not the run's checkpoint.json
            result.imported += data["totals"]["imported"]
            result.rejected += data["totals"]["rejected"]
    result.runs = len(runs)
    result.overlapping_runs = _overlaps(runs)
    result.run_s = round(sum(e - s for s, e in runs), 2)
    rows_in_table = members.query_entities(f"PartitionKey eq '{name}'", select=["RowKey"])
    with contextlib.suppress(ResourceNotFoundError):  # no table: nothing was imported
        result.members_in_table = sum(1 for r in rows_in_table if is_member_row(r["RowKey"]))
    result.emails = sum(1 for e in emails if e.event_id.startswith(f"import-{name}-"))
    result.files_left_in_incoming = sum(
        1 for _ in container.list_blobs(name_starts_with=f"{name}/incoming/")
    )
    return result, runs


def run(
    instances: int = 8,
    accounts: int = 5,
    rows: int = 2000,
    *,
    app_module: str = "function_app",
    app_dir: str = ".",
    fire_after: float = 15.0,
    timeout: float = 600.0,
    keep: bool = False,
    log_level: str = "INFO",
    database_accounts: int = 0,
    database_folder: Path | None = None,
    log_file: str | None = None,
) -> ImportsReport:
    """Run the scenario against the storage account in AzureWebJobsStorage; with
    `database_accounts`, that many more accounts whose members are in a SQLite table (in
    `database_folder`) instead of files."""
    from shared.notifications.outbox import read_outbox

    started = time.monotonic()
    app_settings = _common.use_app_settings(app_dir)
    run_id = _common.new_run_id()
    names = [f"acct-{i:02d}" for i in range(accounts)]
    containers = {
        "IMPORTS_CONTAINER": f"imports-{run_id}",
        "RUNONCE_CONTAINER": f"runonce-{run_id}",
        "LEASE_CONTAINER": f"locks-{run_id}",
        "EMAIL_OUTBOX_CONTAINER": f"outbox-{run_id}",
    }
    queues = {"IMPORT_QUEUE": f"imp-{run_id}", "NOTIFICATIONS_QUEUE": f"ntf-{run_id}"}
    table = f"Members{run_id}"
    account = _common.harness_account("AzureWebJobsStorage")
    blob_service = account.blob_service()
    _common.create_containers(containers.values())
    _common.reset_queues(queues.values())
    container = blob_service.get_container_client(containers["IMPORTS_CONTAINER"])
    expected = _upload(container, names, rows)
    database_settings: dict[str, str | None] = {"IMPORT_DATABASE_ACCOUNTS": None}
    if database_accounts:
        folder = database_folder or Path(".devhost") / f"imports-{run_id}"
        folder.mkdir(parents=True, exist_ok=True)
        databases = [f"{DATABASE_PREFIX}{i:02d}" for i in range(database_accounts)]
        for i, name in enumerate(databases):
            expected[name], more = database_account(folder, name, i, rows)
            database_settings.update(more)
        database_settings["IMPORT_DATABASE_ACCOUNTS"] = ",".join(databases)
        names += databases
    fire_at = (datetime.now(UTC) + timedelta(seconds=fire_after)).replace(microsecond=0)
    functions = _common.functions_bound_to(
        ("IMPORT_SCHEDULE", "IMPORT_QUEUE", "NOTIFICATIONS_QUEUE"), app_module, app_dir
    )
    options = HostOptions(
        instances=instances,
        app_module=app_module,
        app_dir=app_dir,
        http_port=None,
        functions=functions,
        settings={
            **containers,
            **queues,
            "IMPORT_SCHEDULE": _schedule_at(fire_at),
            "IMPORT_ACCOUNTS": None,
            "MEMBERS_TABLE": table,
            "IMPORT_REPORT_TO": "imports-ops@example.com",
            **database_settings,
            "SENDGRID_API_KEY": None,
            "AzureFunctionsWebHost__hostid": f"imports-{run_id}",  # fresh timer status blobs
        },
        log_level=log_level,
        log_file=log_file,
    )
    log.info("run %s: %d instances, %d accounts x %d rows; timer fires at %s", run_id,
             instances, accounts, rows, fire_at.time().isoformat())  # fmt: skip
    with _common.running(options, app_settings) as supervisor:
        if datetime.now(UTC) >= fire_at:
            log.warning("instances were not ready before the timer's time: raise --fire-after")
        time.sleep(max(0.0, (fire_at - datetime.now(UTC)).total_seconds()))
        remaining = max(1.0, timeout - (time.monotonic() - started))
        finished = _wait_for_reports(supervisor, container, names, remaining)
        if finished:  # then let the summary emails go out
            _common.wait_until_drained(supervisor, list(queues.values()), timeout=60, quiet=2)
    totals = supervisor.totals()
    emails = read_outbox(containers["EMAIL_OUTBOX_CONTAINER"])
    members = TableServiceClient.from_connection_string(
        account.connection_string or "",
        raw_request_hook=_common.scenario_counter,
        **_common.harness_table_options(),
    ).get_table_client(table)
    report = ImportsReport(
        run_id=run_id,
        instances=instances,
        accounts=accounts,
        rows_per_account=rows,
        timer_firings=totals.invocations.get("nightly_import", 0),
        import_invocations=totals.invocations.get("import_account", 0),
        failed_invocations=sum(totals.failures.values()),
        finished=finished,
        elapsed_s=round(time.monotonic() - started, 2),
    )
    intervals: list[tuple[float, float]] = []
    for name in names:
        result, runs = account_result(container, members, emails, name, rows, expected[name])
        report.per_account[name] = result
        intervals += runs
    results = report.per_account.values()
    report.overlapping_runs_same_account = sum(a.overlapping_runs for a in results)
    report.max_accounts_in_parallel = _max_parallel(intervals)
    report.instances_that_imported = len({i for a in results for i in a.instances})
    report.total_rows = sum(a.rows for a in results)
    if intervals:
        window = max(e for _, e in intervals) - min(s for s, _ in intervals)
        report.import_window_s = round(window, 2)
        report.rows_per_s = round(report.total_rows / max(window, 1e-6), 1)
    if not keep and report.ok:
        _common.delete_queues(queues.values())
        _common.delete_containers(containers.values())
        members.delete_table()
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--instances", type=int, default=8)
    parser.add_argument("--accounts", type=int, default=5)
    parser.add_argument("--rows", type=int, default=2000, help="CSV rows per account")
    parser.add_argument(
        "--fire-after", type=float, default=15.0,
        help="seconds from now to the timer's occurrence (the instances must be up by then)",
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--database-accounts", type=int, default=0,
                        help="more accounts whose members are in a SQLite table")  # fmt: skip


def main(args: argparse.Namespace) -> int:
    with _common.scenario_storage(args.azurite, args.app_dir):
        report = run(
            args.instances, args.accounts, args.rows, app_module=args.app, app_dir=args.app_dir,
            fire_after=args.fire_after, timeout=args.timeout, keep=args.keep,
            log_level=args.log_level, database_accounts=args.database_accounts,
        )  # fmt: skip
    return _common.print_report(report, args.json, kept="its storage is kept for inspection")
