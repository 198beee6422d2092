"""One import run of one account: every file in `incoming/`, streamed, validated, fenced.

Call it while holding the account's lease, with the lease's fencing token. The whole run is
one invocation: files are streamed (memory stays flat) and members go out 99 per
transaction, so 100,000 rows take about a minute on Azurite, well inside the 10-minute
function timeout, with progress logged every 5 seconds. There is no mid-file checkpoint
(chosen over one: simpler, and nothing is lost without it): a run that crashes is taken
over by the next delivery, which re-reads the files still in `incoming/` from the start.
That is safe because upserts are idempotent, a file's rejects are committed as one blob,
and a file leaves `incoming/` only after its members are committed and its rejects
written. The report is rewritten after each file, so a takeover's report still lists the
files an earlier attempt finished.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from azure.core.exceptions import ResourceModifiedError, ResourceNotFoundError

from shared.imports import file_mover
from shared.imports.blob_source import open_text
from shared.imports.csv_reader import read_csv
from shared.imports.duplicates import IdFilter
from shared.imports.edi_reader import check_envelope, read_834
from shared.imports.layout import Layout, container_name, imports_container
from shared.imports.member_table import FencedMemberWriter, Provenance, StaleHolder
from shared.imports.records import Member, SourceFileError, SourceRecord
from shared.imports.rejects import RejectWriter
from shared.imports.report import FileReport, RunReport
from shared.imports.request import ImportRequest
from shared.imports.summary_email import enqueue_summary
from shared.imports.validation import RecordError, validate_member

log = logging.getLogger("shared.imports")

PROGRESS_EVERY = 5.0
KINDS = {".csv": "csv", ".834": "x12-834", ".x12": "x12-834", ".edi": "x12-834"}


def kind_of(name: str) -> str | None:
    lowered = name.lower()
    return next((kind for ext, kind in KINDS.items() if lowered.endswith(ext)), None)


@dataclass
class _Run:
    request: ImportRequest
    layout: Layout
    container: Any
    writer: FencedMemberWriter
    report: RunReport
    today: date
    connection: str
    progress_every: float


def run_import(
    request: ImportRequest,
    token: int,
    *,
    connection: str = "AzureWebJobsStorage",
    progress_every: float = PROGRESS_EVERY,
    batch_size: int | None = None,
    email: bool = True,
) -> RunReport:
    """Import every incoming file of `request.account`; returns the run report.

    Raises `StaleHolder` (after one log line) when a newer lease holder took the account
    over: from then on nothing more is written, not even the report.
    """
    layout = Layout(request.account, request.run_id)
    container = imports_container(connection, create=True)
    report = RunReport(request.account, request.run_id, request.run_date, request.trigger, token)
    writer_args = {"batch_size": batch_size} if batch_size else {}
    writer = FencedMemberWriter(request.account, token, request.run_id, **writer_args)
    run = _Run(request, layout, container, writer, report, datetime.now(UTC).date(), connection,
               progress_every)  # fmt: skip
    file_mover.write_json(container, layout.attempt(token), report.attempt())
    log.info("import %s/%s started: token %d, %s run", request.account, request.run_id, token,
             request.trigger)  # fmt: skip
    try:
        writer.open()
        report.files.extend(_earlier_attempts_files(container, layout))
        incoming = sorted(container.list_blobs(name_starts_with=layout.incoming),
                          key=lambda b: b.name)  # fmt: skip
        for blob in incoming:
            report.files.append(_import_file(run, blob))
            writer.confirm()
            file_mover.write_json(container, layout.report, report.to_dict())  # progress
        writer.confirm()
    except StaleHolder:
        report.finish("stale")
        raise
    report.finish("completed")
    file_mover.write_json(container, layout.report, report.to_dict())
    file_mover.write_json(container, layout.attempt(token), report.attempt("completed"))
    log.info(
        "import %s/%s done: %d file(s), %d records, %d imported, %d rejected in %.1f s "
        "(%.0f rows/s), token %d",
        request.account, request.run_id, len(report.files), report.records, report.imported,
        report.rejected, report.duration_s, report.records / max(report.duration_s, 1e-6), token,
    )  # fmt: skip
    if email:
        enqueue_summary(report, f"{container_name()}/{layout.report}", connection)
    return report


def _earlier_attempts_files(container: Any, layout: Layout) -> list[FileReport]:
    """Files an earlier attempt of this run finished before it died (they left incoming/),
    taken from the report it kept up to date, so the final report still lists them."""
    try:
        data = json.loads(container.download_blob(layout.report).readall())
    except ResourceNotFoundError:
        return []
    files = [FileReport.from_dict(f) for f in data.get("files", [])]
    return [f for f in files if f.status != "pending"]


def _import_file(run: _Run, blob: Any) -> FileReport:
    name = run.layout.file_name(blob.name)
    kind = kind_of(name)
    result = FileReport(name=name, kind=kind or "unknown", bytes=int(blob.size or 0),
                        token=run.writer.token)  # fmt: skip
    started = time.monotonic()
    try:
        if kind is None:
            raise SourceFileError("unsupported file type (expected .csv, .834, .x12 or .edi)")
        _import_records(run, blob, kind, result)
    except SourceFileError as error:
        run.writer.discard()
        _reject_whole_file(run, blob, result, str(error))
    except (file_mover.SourceChanged, ResourceModifiedError):
        run.writer.discard()
        result.status = "changed"
        result.error = "replaced during the import; the new version is left in incoming"
        log.warning("import %s/%s: %s changed during the import; left in incoming",
                    run.request.account, run.request.run_id, name)  # fmt: skip
    result.duration_s = round(time.monotonic() - started, 3)
    return result


def _records(run: _Run, blob: Any, kind: str) -> Any:
    container = container_name()
    if kind == "csv":
        return read_csv(open_text(container, blob.name, blob.etag, run.connection))
    problems = check_envelope(open_text(container, blob.name, blob.etag, run.connection))
    if problems:
        extra = f"; {len(problems) - 5} more" if len(problems) > 5 else ""
        raise SourceFileError("X12 envelope errors: " + "; ".join(problems[:5]) + extra)
    return read_834(open_text(container, blob.name, blob.etag, run.connection))


def _import_records(run: _Run, blob: Any, kind: str, result: FileReport) -> None:
    request, writer = run.request, run.writer
    rejects = RejectWriter(run.container.get_blob_client(run.layout.rejected_records(result.name)),
                           result.name)  # fmt: skip
    seen = IdFilter()
    next_progress = time.monotonic() + run.progress_every
    started = time.monotonic()
    for record in _records(run, blob, kind):
        result.records += 1
        origin = Provenance(request.run_id, result.name, record.location)
        outcome = _classify(record, seen, writer, origin, run.today)
        if isinstance(outcome, Member):
            writer.add(outcome, origin)
            seen.add(outcome.member_id)
            result.imported += 1
        else:
            category, reason = outcome
            rejects.add(record, reason)
            result.reject(record.location, record.member_id, category, reason)
        if time.monotonic() >= next_progress:
            next_progress = time.monotonic() + run.progress_every
            log.info("import %s/%s: %s: %d records, %d imported, %d rejected (%.0f rows/s)",
                     request.account, request.run_id, result.name, result.records,
                     result.imported, result.rejected,
                     result.records / (time.monotonic() - started))  # fmt: skip
    writer.flush()
    rejects.commit()
    writer.confirm()  # the blob effects below are not covered by the table's If-Match
    file_mover.move_blob(run.container, blob.name, run.layout.processed(result.name), blob.etag)
    result.status = "processed"
    log.info("import %s/%s: %s processed: %d records, %d imported, %d rejected",
             request.account, request.run_id, result.name, result.records, result.imported,
             result.rejected)  # fmt: skip


def _classify(
    record: SourceRecord,
    seen: IdFilter,
    writer: FencedMemberWriter,
    origin: Provenance,
    today: date,
) -> Member | tuple[str, str]:
    """The member to import, or (category, reason) to reject the record with.

    A member id is imported at most once per file: the first valid record with it wins,
    and a later one is rejected as a duplicate naming where the first came from.
    """
    if record.error is not None:
        return "format", record.error
    try:
        member = validate_member(record.fields or {}, today=today)
    except RecordError as error:
        return error.field, str(error)
    if seen.might_contain(member.member_id):
        first = writer.imported_at(member.member_id, origin)
        if first is not None:
            return "duplicate", f"member_id: duplicate in this file, first at {first}"
    return member


def _reject_whole_file(run: _Run, blob: Any, result: FileReport, reason: str) -> None:
    """Move the file to rejected/ with its reason next to it (after the fence check)."""
    result.status = "rejected"
    result.error = reason
    run.writer.confirm()
    layout = run.layout
    file_mover.write_json(run.container, layout.rejected_reason(result.name), {
        "source": result.name, "run_id": run.request.run_id, "reason": reason,
    })  # fmt: skip
    file_mover.move_blob(run.container, blob.name, layout.rejected_file(result.name), blob.etag)
    log.warning("import %s/%s: %s rejected as a whole: %s", run.request.account,
                run.request.run_id, result.name, reason)  # fmt: skip
