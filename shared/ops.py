"""The app's own operator views: batch jobs and nightly imports, next to the library's.

    python -m shared.ops jobs [--prefix P] [--json]      progress and callback state per job
    python -m shared.ops imports [--prefix P] [--json]   the last run of each account
    python -m shared.ops timers [--json]                 each timer's last run, next due, and
                                                         missed, skipped and late occurrences
    python -m shared.ops locks|runs|break|reset ...      the library's (blobsingleton.ops)

Reads the storage the app uses (AzureWebJobsStorage: connection string or identity settings).

What the views show, whoever asks: an import report as counts, file names, locations and
reasons (`report_view`: an allow-list of fields; the stored report's rejection samples carry
member ids, which are left out), and a job's callback by its state and HTTP status only. Run
outcomes (what a run-once function returned) are for operators only: the library's
`ops.list_runs` shows them only when asked (`outcomes=True`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Annotated, Any, cast

from azure.core.paging import PageIterator
from blobsingleton import ops, timers
from blobsingleton.config import encode_key
from blobsingleton.errors import InvalidKey
from pydantic import AfterValidator, ConfigDict, Field

from shared.imports.accounts import InvalidAccount, validate_account
from shared.imports.layout import imports_container
from shared.jobs import JobSettings, JobStore, job_status
from shared.jobs.layout import job_id_of
from shared.models import MessageModel, Problem, rule

JOB_COLUMNS = ("job_id", "status", "total", "units_done", "units_failed", "units_outstanding",
               "callback")  # fmt: skip
TIMER_COLUMNS = ("function", "schedule", "last_run", "next_due", "late", "missed", "skipped")
IMPORT_COLUMNS = ("account", "run_id", "status", "instance", "records", "imported", "rejected",
                  "duration_s", "errors")  # fmt: skip


def _reason(value: str) -> str:
    try:
        return ops.validate_reason(value)
    except ops.InvalidRequest as error:
        raise rule(str(error)) from None


class ActionRequest(MessageModel):
    """The body of a break or a reset (`POST /api/locks/{key}/break`, `/api/runs/{key}/reset`):
    `{"reason": "..."}`, what a person wrote for the audit log. Other fields are ignored."""

    model_config = ConfigDict(extra="ignore")
    error = ops.InvalidRequest
    max_bytes = 16 * 1024  # a reason is at most 500 characters
    max_elements = 1_000

    reason: Annotated[str, AfterValidator(_reason)] = Field(default="", validate_default=True)

    @classmethod
    def invalid(cls, problems: list[Problem]) -> Exception:
        [first, *_] = problems
        if not first.field:
            return ops.InvalidRequest(
                f'the body must be JSON, {{"reason": "..."}}; it {first.message}'
            )
        return ops.InvalidRequest("; ".join(p.describe() for p in problems))


def _callback_state(status: dict[str, Any]) -> str | None:
    announcement = status.get("announcement")
    if not announcement:
        return None
    return str(announcement.get("status") or announcement.get("state") or "recorded")


def list_jobs(prefix: str = "", limit: int = 20, marker: str | None = None) -> ops.Page:
    """Jobs still under `jobs/` (running, or finished and not yet archived), one page."""
    prefix = ops.validate_prefix(prefix)
    store = JobStore(JobSettings.from_env())
    container = store._container  # the jobs container the store itself uses
    listing = container.walk_blobs(
        name_starts_with="jobs/" + encode_key(prefix), delimiter="/", results_per_page=limit
    )
    # by_page() is typed as a plain iterator; it is azure-core's PageIterator, with the token.
    pages = cast(PageIterator[Any], listing.by_page(continuation_token=marker or None))
    items = []
    page = _first_page(pages)
    if page is None:
        return ops.Page([], None)
    for entry in page:
        job_id = job_id_of(entry.name)
        status = job_status(store, job_id) if job_id else None
        if status is not None:
            items.append({**status, "callback": _callback_state(status)})
    return ops.Page(items, pages.continuation_token or None)


def _first_page(pages: Iterator[Any]) -> list[Any] | None:
    """The next page of a listing; None when its container does not exist (nothing to show)."""
    try:
        return list(next(pages))
    except StopIteration:
        return []
    except Exception as error:
        if getattr(error, "status_code", None) == 404:
            return None
        raise


def _last_report(container: Any, account: str) -> dict[str, Any] | None:
    """The most recently written run report of `account` (one listing, one read)."""
    latest = None
    for blob in container.list_blobs(name_starts_with=f"{account}/reports/"):
        if blob.name.endswith("/report.json") and (
            latest is None or blob.last_modified > latest.last_modified
        ):
            latest = blob
    if latest is None:
        return None
    report: dict[str, Any] = json.loads(container.download_blob(latest.name).readall())
    return report


#: The fields of a stored run report an operator view shows (shared.imports.report): counts,
#: names, times and reasons; a field added to the report is not shown until it is listed here.
REPORT_FIELDS = ("account", "run_id", "run_date", "trigger", "token", "instance", "status",
                 "started_at", "finished_at", "duration_s", "totals", "errors")  # fmt: skip
FILE_FIELDS = ("name", "kind", "status", "token", "bytes", "records", "imported", "rejected",
               "added", "changed", "terminated", "reinstated", "unchanged", "duration_s",
               "error", "audit", "reasons")  # fmt: skip
REJECTION_FIELDS = ("location", "line", "reason")  # never member_id


def report_view(report: dict[str, Any]) -> dict[str, Any]:
    """The run report without member data: only the fields listed above."""
    view = {name: report[name] for name in REPORT_FIELDS if name in report}
    files = []
    for entry in report.get("files") or []:
        file_view = {name: entry[name] for name in FILE_FIELDS if name in entry}
        file_view["rejections"] = [
            {name: sample[name] for name in REJECTION_FIELDS if name in sample}
            for sample in entry.get("rejections") or []
        ]
        files.append(file_view)
    view["files"] = files
    return view


def list_imports(prefix: str = "", limit: int = 50, marker: str | None = None) -> ops.Page:
    """The last run of each account (whose name starts with `prefix`), with its report."""
    if prefix:
        try:
            validate_account(prefix)
        except InvalidAccount as error:
            raise ops.InvalidRequest(f"invalid prefix: {error.reason}") from error
    container = imports_container()
    pages = container.walk_blobs(
        name_starts_with=prefix or None, delimiter="/", results_per_page=limit
    ).by_page(continuation_token=marker or None)
    page = _first_page(pages)
    if page is None:
        return ops.Page([], None)
    items = []
    for entry in page:
        if not entry.name.endswith("/"):
            continue
        try:
            account = validate_account(entry.name[:-1])
        except InvalidAccount:
            continue
        stored = _last_report(container, account)
        report = report_view(stored) if stored is not None else None
        totals = (report or {}).get("totals", {})
        items.append({
            "account": account,
            "run_id": report and report.get("run_id"),
            "status": report.get("status") if report else "never run",
            "instance": report and report.get("instance"),
            "started_at": report and report.get("started_at"),
            "duration_s": report and report.get("duration_s"),
            "records": totals.get("records"),
            "imported": totals.get("imported"),
            "rejected": totals.get("rejected"),
            "files_rejected": totals.get("files_rejected"),
            "errors": len((report or {}).get("errors") or []),
            "report": report,
        })  # fmt: skip
    return ops.Page(items, pages.continuation_token or None)


def list_timers(functions: Sequence[Callable[..., Any]]) -> dict[str, Any]:
    """Each scheduled function's ledger (`blobsingleton.timers`: last run, next due, missed and
    skipped occurrences, late); late occurrences are reported as they are read (an
    `event=timer_late` warning and the `blobsingleton.timer.late` gauge), so asking is an
    alert's probe, from any instance."""
    return {"items": [ledger.to_dict() for ledger in timers.check(*functions)]}


def _timer_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for item in data["items"]:
        last = item["last_run"]
        rows.append({
            **item, "last_run": last and f"{last['occurrence']} {last['outcome']}",
            "missed": len(item["missed"]), "skipped": len(item["skipped"]),
        })  # fmt: skip
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = ops.build_parser("python -m shared.ops", ("jobs", "imports", "timers"))
    args = parser.parse_args(argv)
    if args.command == "timers":
        from functions.ops import TIMERS  # the app's scheduled functions (needs its settings)

        data = list_timers(TIMERS)
        if args.json:
            print(json.dumps(data, indent=2))
        else:
            ops.print_table(_timer_rows(data), TIMER_COLUMNS, sys.stdout)
        return 0
    if args.command not in ("jobs", "imports"):
        return ops.run_command(args)
    try:
        page = (list_jobs if args.command == "jobs" else list_imports)(
            args.prefix, args.limit, args.next
        )
    except (ops.OpsError, InvalidKey) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    columns = JOB_COLUMNS if args.command == "jobs" else IMPORT_COLUMNS
    ops.show(page, args, sys.stdout, columns)
    return 0


if __name__ == "__main__":
    sys.exit(main())
