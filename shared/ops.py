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
from datetime import UTC, datetime
from typing import Annotated, Any, cast

from azure.core.paging import PageIterator
from blobsingleton import ops, timers
from blobsingleton.config import encode_key, namespace
from blobsingleton.errors import InvalidKey
from pydantic import AfterValidator, ConfigDict, Field

from shared import ops_problems
from shared.imports.accounts import InvalidAccount, validate_account
from shared.imports.layout import imports_container
from shared.jobs import JobSettings, JobStore, job_status
from shared.jobs.layout import job_id_of
from shared.models import MessageModel, Problem, rule
from shared.ops_notes import iso

JOB_COLUMNS = ("job_id", "state", "total", "units_done", "units_failed", "units_outstanding",
               "callback", "created", "completed")  # fmt: skip
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
    if announcement:
        return str(announcement.get("state") or "recorded")
    tries = status.get("failed_tries")
    if tries:
        count = int(tries["tries"])
        return f"failing ({tries['reason']}, {count} {'try' if count == 1 else 'tries'})"
    return None


def job_view(
    status: dict[str, Any], stall_seconds: float, give_up_seconds: float
) -> dict[str, Any]:
    """A job's status as operators read it: times in ISO, the callback's state, and `state`:
    its status, unless its callback keeps failing ("callback failing": not finished for whoever
    waits for the callback) or was refused or abandoned."""
    view = {
        **status,
        "created": iso(status.get("created_at")),
        "completed": iso(status.get("completed_at")),
        "callback": _callback_state(status),
    }
    state = str(status.get("status"))
    tries = status.get("failed_tries")
    announcement = status.get("announcement") or {}
    if tries and not announcement:
        state = "callback failing"
        view["callback_failing"] = {
            "tries": tries["tries"],
            "http_status": tries.get("http_status"),
            "reason": tries["reason"],
            "last_try": iso(tries["last_at"]),
            # the watcher queues it again at each sweep once the outcome is JOB_STALL_SECONDS old
            "next_try": iso(
                max(float(tries["last_at"]), float(status["completed_at"]) + stall_seconds)
            ),
            "gives_up": iso(float(status["completed_at"]) + give_up_seconds),
        }
    elif announcement.get("state") in ("refused", "abandoned"):
        state = f"callback {announcement['state']}"
    view["state"] = state
    return view


def list_jobs(prefix: str = "", limit: int = 20, marker: str | None = None) -> ops.Page:
    """Jobs still under `jobs/` (running, or finished and not yet archived), one page."""
    prefix = ops.validate_prefix(prefix)
    settings = JobSettings.from_env()
    store = JobStore(settings)
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
            items.append(job_view(status, settings.stall_seconds, settings.give_up_seconds))
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


def _last_reports(container: Any, account: str) -> tuple[Any, Any]:
    """The most recently written run report of `account`, and the most recent one of a run
    that read records (when not the same): one listing, one or a few reads."""
    listed = [b for b in container.list_blobs(name_starts_with=f"{account}/reports/")
              if b.name.endswith("/report.json")]  # fmt: skip
    listed.sort(key=lambda b: (b.last_modified, b.name), reverse=True)  # a second apart: by name
    latest = read_data = None
    for position, blob in enumerate(listed[:MAX_REPORTS_READ]):
        report: dict[str, Any] = json.loads(container.download_blob(blob.name).readall())
        if position == 0:
            latest = report
        if int((report.get("totals") or {}).get("records") or 0) > 0:
            read_data = report if position else None
            break
    return latest, read_data


#: Reports read per account to find its last run that read data (newest first).
MAX_REPORTS_READ = 10


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


def _rejections(report: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Rejected rows and files of a report: file, line and reason (never the values)."""
    found = []
    for entry in (report or {}).get("files") or []:
        for sample in entry.get("rejections") or []:
            where = {"file": entry.get("name"), "location": sample.get("location")}
            found.append({**where, "line": sample.get("line"), "reason": sample.get("reason")})
        if entry.get("status") == "rejected" or entry.get("error"):
            found.append({"file": entry.get("name"), "line": None, "location": None,
                          "reason": entry.get("error") or "file rejected"})  # fmt: skip
    return found


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
        stored, with_data = _last_reports(container, account)
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
            "rejections": _rejections(report),
            "report": report,
            # the latest run read nothing (a manual run on an empty folder): the last that did
            "last_with_data": report_view(with_data) if with_data is not None else None,
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


#: Items of each problem list the overview shows (its `more` says when there are more).
PROBLEMS_SHOWN = 50


def _all_of(lister: Any, limit: int = PROBLEMS_SHOWN) -> tuple[list[dict[str, Any]], bool]:
    page = lister(limit)
    return page.items, bool(page.next)


def overview(poison_queues: list[str]) -> dict[str, Any]:
    """What needs a person, newest facts first, and counts per state (the status page's top).
    Costs: the run-once records' listing (counts), one filtered listing each for held locks,
    in-progress and expired runs (`ops.list_*`), the jobs and imports pages, one request per
    poison queue and the newest notes (`shared.ops_problems`)."""
    held, more_held = _all_of(lambda n: ops.list_locks(limit=n, held=True))
    running, more_running = _all_of(lambda n: ops.list_runs(state="in_progress", limit=n))
    expired, more_expired = _all_of(lambda n: ops.list_runs(state="expired", limit=n))
    jobs = list_jobs(limit=PROBLEMS_SHOWN)
    imports = list_imports(limit=PROBLEMS_SHOWN)
    poison = ops_problems.poison_queues(poison_queues)
    job_states: dict[str, int] = {}
    for job in jobs.items:
        job_states[job["state"]] = job_states.get(job["state"], 0) + 1
    rejected = [{"account": i["account"], "run_id": i["run_id"], **r}
                for i in imports.items for r in i["rejections"]]  # fmt: skip
    return {
        "at": datetime.now(UTC).isoformat(),
        "namespace": namespace(),
        "counts": {
            "locks held": len(held),
            "runs": ops.count_runs(),
            "jobs": job_states,
            "poison messages": sum(q["count"] for q in poison),
            "rejected rows": sum(int(i["rejected"] or 0) for i in imports.items),
        },
        "held_locks": held,
        "more_held_locks": more_held,
        "runs": running + expired,
        "more_runs": more_running or more_expired,
        "failing_callbacks": [j for j in jobs.items if j["state"].startswith("callback")],
        "poison": poison,
        "rejected_rows": rejected,
        "lost_leases": ops_problems.newest("lost"),
    }


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
