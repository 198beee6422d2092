"""One import run of one account: every file in `incoming/`, streamed, validated, fenced.

Call it while holding the account's lease, with the lease's fencing token. Files are read
in name order and each file's records in file order; each record is applied to the
member's state as stored (`maintenance.apply`, one read of the member row unless it is in
the pending batch), so the state after a file is what the file says last: a member
cancelled in one transaction set and re-enrolled in a later one ends up enrolled, and an
identical repeat changes nothing. What each record did (add, change, termination,
reinstatement) is written as a history row beside the member, in the same fenced
transaction. An 834 whose member loops are all 030 (audit) is the account's full list:
afterwards, members it left out are terminated (`_sweep`).

The whole run is one invocation: files are streamed (memory stays flat) and rows go out 99
per transaction, with progress logged every 5 seconds. There is no mid-file checkpoint: a
run that crashes is taken over by the next delivery, which re-reads the files still in
`incoming/` from the start. That is safe because every member row remembers the state it
had before the file (`member_table.Prior`), a file's rejects are committed as one blob,
and a file leaves `incoming/` only after its members are committed and its rejects
written. The report is rewritten after each file, so a takeover's report still lists the
files an earlier attempt finished.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from itertools import islice
from typing import Any

from azure.core.exceptions import ResourceModifiedError, ResourceNotFoundError

from shared.imports import file_mover
from shared.imports.blob_source import open_text
from shared.imports.csv_reader import read_csv
from shared.imports.edi_reader import FileFacts, check_envelope, read_834
from shared.imports.history import event_entity
from shared.imports.layout import Layout, container_name, imports_container
from shared.imports.maintenance import (
    TERMINATION_EVENT,
    UNCHANGED,
    apply,
    classify,
    event_effective,
    swept,
)
from shared.imports.member_table import (
    FencedMemberWriter,
    Provenance,
    StaleHolder,
    decode_state,
    encode_state,
    file_key,
    member_from_entity,
)
from shared.imports.records import AUDIT, Change, SourceFileError, SourceRecord
from shared.imports.rejects import RejectWriter
from shared.imports.report import FileReport, RunReport
from shared.imports.request import ImportRequest
from shared.imports.summary_email import enqueue_summary
from shared.imports.validation import (
    RecordError,
    change_of_row,
    validate_change,
    validate_member,
)

log = logging.getLogger("shared.imports")

PROGRESS_EVERY = 5.0
#: Rejected member ids an audit file may have before its sweep is skipped (their members
#: must not be terminated for being "absent"; the ids are held in memory until the sweep).
MAX_AUDIT_REJECTS = 10_000
#: Records validated together, and their member rows read in parallel, ahead of applying them.
PREFETCH_WINDOW = 128
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


def _records(run: _Run, blob: Any, kind: str, facts: FileFacts) -> Any:
    container = container_name()
    if kind == "csv":
        return read_csv(open_text(container, blob.name, blob.etag, run.connection))
    problems = check_envelope(open_text(container, blob.name, blob.etag, run.connection))
    if problems:
        extra = f"; {len(problems) - 5} more" if len(problems) > 5 else ""
        raise SourceFileError("X12 envelope errors: " + "; ".join(problems[:5]) + extra)
    return read_834(open_text(container, blob.name, blob.etag, run.connection), facts)


@dataclass
class _Audit:
    """Whether a file is an audit (every member loop 030), and who it rejected."""

    members: int = 0
    audit_loops: int = 0
    rejected_ids: set[str] = field(default_factory=set)
    rejected_without_id: int = 0

    def add(self, record: SourceRecord, *, rejected: bool) -> None:
        self.members += 1
        # a loop pyx12 rejected (no change read) cannot prove the file is not an audit
        if record.change is None or record.change.maintenance == AUDIT:
            self.audit_loops += 1
        if rejected and record.member_id:
            self.rejected_ids.add(record.member_id)
        elif rejected:
            self.rejected_without_id += 1

    def skip_reason(self) -> str | None:
        if self.members == 0 or self.audit_loops != self.members:
            return "not an audit file"
        if self.rejected_without_id:
            return f"{self.rejected_without_id} rejected record(s) without a member id"
        if len(self.rejected_ids) > MAX_AUDIT_REJECTS:
            return f"more than {MAX_AUDIT_REJECTS} rejected records"
        return None


def _import_records(run: _Run, blob: Any, kind: str, result: FileReport) -> None:
    request, writer = run.request, run.writer
    rejects = RejectWriter(run.container.get_blob_client(run.layout.rejected_records(result.name)),
                           result.name)  # fmt: skip
    key_of_file = file_key(request.run_id, result.name, str(blob.etag or ""))
    facts = FileFacts()
    audit = _Audit()
    next_progress = time.monotonic() + run.progress_every
    started = time.monotonic()
    for record, prepared in _prepared(run, _records(run, blob, kind, facts)):
        result.records += 1
        origin = Provenance(request.run_id, result.name, record.location)
        outcome = _import_record(run, record, prepared, origin, key_of_file)
        if kind != "csv":
            audit.add(record, rejected=not isinstance(outcome, str))
        if isinstance(outcome, str):
            result.count(outcome)
        else:
            category, reason = outcome
            rejects.add(record, reason)
            result.reject(record.location, record.member_id, category, reason, record.line)
        if time.monotonic() >= next_progress:
            next_progress = time.monotonic() + run.progress_every
            log.info("import %s/%s: %s: %d records, %d imported, %d rejected (%.0f rows/s)",
                     request.account, request.run_id, result.name, result.records,
                     result.imported, result.rejected,
                     result.records / (time.monotonic() - started))  # fmt: skip
    writer.flush()
    if kind != "csv":
        _sweep(run, result, audit, facts, key_of_file)
    rejects.commit()
    writer.confirm()  # the blob effects below are not covered by the table's If-Match
    file_mover.move_blob(run.container, blob.name, run.layout.processed(result.name), blob.etag)
    result.status = "processed"
    log.info("import %s/%s: %s processed: %d records, %d imported, %d rejected",
             request.account, request.run_id, result.name, result.records, result.imported,
             result.rejected)  # fmt: skip


def _change_of(record: SourceRecord, today: date) -> Change:
    if record.change is not None:
        return validate_change(record.change, today=today)
    return change_of_row(validate_member(record.fields or {}, today=today))


def _prepare(record: SourceRecord, today: date) -> Change | tuple[str, str]:
    """The record's validated change, or (category, reason) to reject it with."""
    if record.error is not None:
        return "format", record.error
    try:
        return _change_of(record, today)
    except RecordError as error:
        return error.field, str(error)


def _prepared(
    run: _Run, records: Iterator[SourceRecord]
) -> Iterator[tuple[SourceRecord, Change | tuple[str, str]]]:
    """Records with their changes, PREFETCH_WINDOW at a time, their members' rows read
    ahead in parallel (one read each would otherwise be a round trip per record)."""
    while True:
        window = [(r, _prepare(r, run.today)) for r in islice(records, PREFETCH_WINDOW)]
        if not window:
            return
        run.writer.prefetch([c.member_id for _, c in window if isinstance(c, Change)])
        yield from window


def _import_record(
    run: _Run,
    record: SourceRecord,
    prepared: Change | tuple[str, str],
    origin: Provenance,
    key_of_file: str,
) -> str | tuple[str, str]:
    """Apply one record; returns what it did (maintenance.classify) or (category, reason).

    An 834 record is applied in file order whatever came before it in the file. A CSV row
    has no maintenance type, so a second, different row for the same member in one CSV
    file is rejected as a conflicting duplicate (an identical one changes nothing).
    """
    if not isinstance(prepared, Change):
        return prepared
    change = prepared
    writer = run.writer
    prior = writer.prior(change.member_id, key_of_file)
    member = apply(prior.member, change)
    kind = classify(prior.member, member)
    if kind == UNCHANGED:
        return kind
    if record.change is None and prior.location is not None:
        first = prior.location
        return "duplicate", f"member_id: conflicting duplicate in this file, first at {first}"
    effective = event_effective(kind, change, member)
    event = event_entity(kind, member, prior.member, effective, origin, key_of_file,
                         f"{record.number:010d}")  # fmt: skip
    writer.put(member, origin, key_of_file=key_of_file, base=prior.base, event=event)
    return kind


def _sweep(run: _Run, result: FileReport, audit: _Audit, facts: FileFacts, key: str) -> None:
    """After an audit file: terminate the active members it left out, effective the day
    before the file's effective date (header DTP*007, else BGN03)."""
    reason = audit.skip_reason()
    if reason == "not an audit file":
        return
    if reason is None and facts.effective is None:
        reason = "the file has no effective date (DTP*007 or BGN03)"
    if reason is not None:
        result.audit = f"members absent from this audit file were not terminated: {reason}"
        log.warning("import %s/%s: %s: %s", run.request.account, run.request.run_id,
                    result.name, result.audit)  # fmt: skip
        return
    assert facts.effective is not None
    end = facts.effective - timedelta(days=1)
    origin = Provenance(run.request.run_id, result.name, "audit: absent from the file")
    count = 0
    for entity in run.writer.active_members_not_in(key):
        if entity.get("Swept") == key:  # an earlier attempt's sweep: start from before it
            base = str(entity.get("BaseState"))
            previous = decode_state(base)
        else:
            previous = member_from_entity(entity)
            base = encode_state(previous)
        if previous is None or previous.member_id in audit.rejected_ids:
            continue
        ended = swept(previous, end)
        event = event_entity(TERMINATION_EVENT, ended, previous, end, origin, key,
                             f"absent~{entity['RowKey']}")  # fmt: skip
        run.writer.put(ended, origin, key_of_file=key, base=base, event=event, swept=True)
        result.count(TERMINATION_EVENT, record=False)
        count += 1
    run.writer.flush()
    result.audit = f"{count} member(s) absent from this audit file terminated, effective {end}"
    log.info("import %s/%s: %s: %s", run.request.account, run.request.run_id, result.name,
             result.audit)  # fmt: skip


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
