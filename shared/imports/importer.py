"""One import run of one account: every file in `incoming/`, streamed, validated, fenced;
then, for a nightly or manual run of an account in IMPORT_DATABASE_ACCOUNTS, its database
source (`_import_database`, `db_reader.py`): one more source kind through the same records
pass, checkpoints (one per keyset page, its last key as the resume point), rejects and report.

Call it while holding the account's lease, with the lease's fencing token. Files are read
in name order and each file's records in file order; each record is applied to the
member's state as stored (`maintenance.apply`, one read of the member row unless it is in
the pending batch), so the state after a file is what the file says last: a member
cancelled in one transaction set and re-enrolled in a later one ends up enrolled, and an
identical repeat changes nothing. What each record did (add, change, termination,
reinstatement) is written as a history row beside the member, in the same fenced
transaction. An 834 whose member loops are all 030 (audit) is the account's full list:
afterwards, members it left out are terminated (`_sweep`).

Files are streamed (memory stays flat) and read in chunks of IMPORT_CHUNK_RECORDS
records (default 5,000; an 834 chunk ends where a family ends): at the end of a chunk
its rows are committed (99 per transaction, IMPORT_WRITE_LANES transactions in flight),
its rejects staged, and the run's checkpoint (`checkpoint.py`) saved: which file, where to
resume it (byte offset, reader state), its counts so far. An invocation works for at most
IMPORT_INVOCATION_BUDGET_S seconds (default 240), then stops at the next chunk end and
returns a report with status "continued": the queue function re-enqueues the same request
(same run id), and the next invocation resumes from the checkpoint with a range read, not
from the top ("resuming run R of account A at record N / byte B"). A crash resumes the
same way from the last checkpoint; rows committed after it are redone from the state the
member had before the chunk (`member_table.Prior.chunk_base`), so every record counts
once. An 834's first pass (`x12.reader.scan_envelope`) is checkpointed the same way.

A file's rejects are committed as one blob when the file is done, and a file leaves
`incoming/` only after its members are committed and its rejects written. The report is
rewritten after each file, so a later invocation's report still lists the files an
earlier one finished.

Every 834 file read is acknowledged (`acks.py`): a 999 (997) and, when due, a TA1, beside
the report in `acks/`, built as the file streams (the envelope pass's document is kept only
if the file is rejected whole; an accepted file's comes from the members pass), staged in
blocks and committed before the file leaves `incoming/`; the report counts them.

Inputs are bounded where they enter (`config.py`): a file name is checked when `incoming/`
is listed (`layout.check_file_name`: a name with ".." is refused, never read); a file over
IMPORT_MAX_FILE_BYTES is rejected whole unread; an 834 family over
IMPORT_MAX_FAMILY_DEPENDENTS and a member loop over IMPORT_MAX_LOOP_SEGMENTS are rejected
record by record, and checkpointed like any other records (`x12.families.Families`). A file
whose rejects would pass IMPORT_MAX_REJECTS records or IMPORT_MAX_REJECT_BYTES bytes stops
there (`_stop_file`): junk costs at most the caps, whatever its size.

A dependent without an id of its own (`dependents.py`) is found by its derived id, by the
id of its values before a 2100B correction, and else among the subscriber's stored
dependents by its identity digest (`_resolve_dependent`): the same child is the same row
whatever corrections it went through.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from itertools import islice
from typing import Any

from azure.core.exceptions import ResourceModifiedError, ResourceNotFoundError

from shared import telemetry
from shared.imports import file_mover
from shared.imports.accounts import InvalidAccount, configured_accounts
from shared.imports.acks import (
    TA1_INVALID_CONTENT,
    TA1_INVALID_STRUCTURE,
    TA1_INVALID_VERSION,
    AckOutcome,
    AckWriter,
    control_number,
    loose_isa,
    write_ta1,
)
from shared.imports.blob_source import open_text
from shared.imports.checkpoint import CheckpointStore
from shared.imports.config import ImportSettings
from shared.imports.csv_reader import read_csv
from shared.imports.db_config import DATABASE, DatabaseSource, database_source
from shared.imports.db_engine import engine_for
from shared.imports.db_reader import SourceUnavailable, check_columns, read_rows
from shared.imports.dependents import identity_digest
from shared.imports.history import event_entity
from shared.imports.layout import (
    InvalidFileName,
    Layout,
    check_file_name,
    container_name,
    imports_container,
)
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
from shared.imports.x12 import speedups
from shared.imports.x12.families import ReadLimits
from shared.imports.x12.members import FileFacts
from shared.imports.x12.reader import read_834, scan_envelope
from shared.settings import InvalidSetting

log = logging.getLogger("shared.imports")

PROGRESS_EVERY = 5.0
#: Rejected member ids an audit file may have before its sweep is skipped (their members
#: must not be terminated for being "absent"; the ids are held in memory until the sweep).
MAX_AUDIT_REJECTS = 10_000
#: Records validated together, and their member rows read (one range query, or in
#: parallel) ahead of applying them.
PREFETCH_WINDOW = 500
KINDS = {".csv": "csv", ".834": "x12-834", ".x12": "x12-834", ".edi": "x12-834"}
X12 = "x12-834"
#: A database read that breaks off after rows were read (a statement timeout, a dropped
#: connection) is read again from the last checkpointed page this many times, after these
#: pauses (seconds), before the source fails for this run.
DATABASE_RETRY_PAUSES_S = (2.0, 10.0)


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
    checkpoint: CheckpointStore
    deadline: float
    chunk_records: int
    saved: dict[str, Any]
    config: ImportSettings
    limits: ReadLimits
    telemetry: telemetry.ImportTelemetry
    progressed: bool = False  # a chunk or a file done in this invocation
    ack: AckWriter | None = None  # the acknowledgment of the 834 being read
    database: _Database | None = None  # the account's database source being read

    def out_of_time(self) -> bool:
        """Past the budget, once this invocation got something done (each makes progress)."""
        return self.progressed and time.monotonic() >= self.deadline


@dataclass(frozen=True)
class _Database:
    """An account's database source in a run, as `_import_records` reads any source: `name`
    and `etag` (the settings' fingerprint: a checkpoint is for these settings) like a blob's."""

    source: DatabaseSource
    engine: Any
    table: Any = None
    size: int = 0

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def etag(self) -> str:
        return self.source.fingerprint


class _OutOfTime(Exception):
    """The invocation's budget is spent; the checkpoint is saved."""


def run_import(
    request: ImportRequest,
    token: int,
    *,
    connection: str = "AzureWebJobsStorage",
    progress_every: float = PROGRESS_EVERY,
    batch_size: int | None = None,
    email: bool = True,
    budget_s: float | None = None,
    chunk_size: int | None = None,
    lanes: int | None = None,
) -> RunReport:
    """Import the incoming files of `request.account` for at most `budget_s` seconds
    (IMPORT_INVOCATION_BUDGET_S), resuming from the run's checkpoint; returns the report,
    status "completed", or "continued" when the budget ran out (the caller hands the run on).
    `chunk_size`, `lanes`: IMPORT_CHUNK_RECORDS and IMPORT_WRITE_LANES unless given.

    Raises `StaleHolder` (after one log line) when a newer lease holder took the account
    over: from then on nothing more is written, not even the report.

    Its span ("import run") and metrics: `shared.telemetry`.
    """
    with telemetry.import_run(request.account, request.run_id, request.trigger, token):
        return _run_import(request, token, connection, progress_every, batch_size, email,
                           budget_s, chunk_size, lanes)  # fmt: skip


def _bounded_accounts() -> list[str] | None:
    """IMPORT_ACCOUNTS, the fixed set an account id may be a metric attribute of (None when
    accounts are discovered, or the setting is unusable: the fan-out reports that)."""
    try:
        return configured_accounts()
    except InvalidAccount:
        return None


def _run_import(
    request: ImportRequest,
    token: int,
    connection: str,
    progress_every: float,
    batch_size: int | None,
    email: bool,
    budget_s: float | None,
    chunk_size: int | None,
    lanes: int | None,
) -> RunReport:
    started = time.monotonic()
    speedups.install()  # the 834 reader's speed-ups inside pyx12 (idempotent)
    config = ImportSettings.from_env()
    limits = ReadLimits(config.max_family_dependents, config.max_loop_segments,
                        config.dependent_id_key)  # fmt: skip
    layout = Layout(request.account, request.run_id)
    container = imports_container(connection, create=True)
    report = RunReport(request.account, request.run_id, request.run_date, request.trigger, token)
    writer_args: dict[str, Any] = {"batch_size": batch_size} if batch_size else {}
    writer = FencedMemberWriter(request.account, token, request.run_id,
                                lanes=lanes or config.lanes, **writer_args)  # fmt: skip
    checkpoint = CheckpointStore(container, layout.checkpoint, request.account, token)
    budget = budget_s if budget_s is not None else config.budget_s
    run = _Run(request, layout, container, writer, report, datetime.now(UTC).date(), connection,
               progress_every, checkpoint, started + budget, chunk_size or config.chunk_records,
               {}, config, limits,
               telemetry.ImportTelemetry(request.account, _bounded_accounts()))  # fmt: skip
    file_mover.write_json(container, layout.attempt(token), report.attempt())
    log.info("import %s/%s started: token %d, %s run", request.account, request.run_id, token,
             request.trigger)  # fmt: skip
    try:
        writer.open()
        run.saved = checkpoint.claim()  # after the table's fence: no older holder moves it now
        invocation = int(checkpoint.data.get("invocations", 1))
        if invocation > 1:
            run.telemetry.resumed(invocation)
        report.files.extend(_earlier_attempts_files(container, layout))
        incoming = sorted(container.list_blobs(name_starts_with=layout.incoming),
                          key=lambda b: b.name)  # fmt: skip
        for blob in incoming:
            if run.out_of_time():
                raise _OutOfTime
            name = layout.file_name(blob.name)
            try:
                check_file_name(name)
            except InvalidFileName as error:
                report.files.append(_refuse(run, name, blob, error))
                continue
            report.files.append(_import_file(run, blob))
            writer.confirm()
            file_mover.write_json(container, layout.report, report.to_dict())  # progress
        database = _import_database(run) if request.trigger != "arrival" else None
        if database is not None:
            report.files.append(database)
            if database.status == "failed":
                report.errors.append(f"{database.name}: {database.error}")
        writer.confirm()
    except _OutOfTime:
        return _continued(run)
    except StaleHolder:
        report.finish("stale")
        run.telemetry.ended(report)
        raise
    finally:
        writer.close()
    outcome = "failed" if any(f.status == "failed" for f in report.files) else "completed"
    report.finish(outcome)
    run.telemetry.ended(report)
    file_mover.write_json(container, layout.report, report.to_dict())
    file_mover.write_json(container, layout.attempt(token), report.attempt(outcome))
    log.info(
        "import %s/%s done: %d file(s), %d records, %d imported, %d rejected; this "
        "invocation %.1f s, token %d",
        request.account, request.run_id, len(report.files), report.records, report.imported,
        report.rejected, report.duration_s, token,
    )  # fmt: skip
    if email and (report.files or request.trigger != "arrival"):
        # an arrival whose file an earlier run took has nothing to tell: no email
        enqueue_summary(report, f"{container_name()}/{layout.report}", connection)
    return report


def _continued(run: _Run) -> RunReport:
    """The budget ran out: the checkpoint says where the next invocation carries on."""
    report, request = run.report, run.request
    run.writer.confirm()
    report.finish("continued")
    run.telemetry.ended(report)
    file_mover.write_json(run.container, run.layout.report, report.to_dict())
    file_mover.write_json(run.container, run.layout.attempt(report.token),
                          report.attempt("continued"))  # fmt: skip
    saved = run.checkpoint.data
    log.info("import %s/%s: invocation budget spent after %.1f s; continuing in a new "
             "invocation from record %s / byte %s of %s", request.account, request.run_id,
             report.duration_s, saved.get("next_record"),
             (saved.get("resume") or {}).get("offset"), saved.get("file"))  # fmt: skip
    return report


def _earlier_attempts_files(container: Any, layout: Layout) -> list[FileReport]:
    """Files an earlier attempt of this run finished before it died (they left incoming/),
    taken from the report it kept up to date, so the final report still lists them."""
    try:
        data = json.loads(container.download_blob(layout.report).readall())
    except ResourceNotFoundError:
        return []
    files = [FileReport.from_dict(f) for f in data.get("files", [])]
    # refused files stay in incoming/: this attempt lists (and refuses) them again; a
    # database source that failed is tried again
    return [f for f in files if f.status not in ("pending", "refused", "failed")]


def _refuse(run: _Run, name: str, blob: Any, error: InvalidFileName) -> FileReport:
    """A file whose name cannot go into derived blob names: left in incoming/, unread, and
    listed in the report (its name JSON-escaped there; the log has no name)."""
    refused = sum(f.status == "refused" for f in run.report.files) + 1
    log.warning("import %s/%s: file %d of incoming/ refused, not read: %s",
                run.request.account, run.request.run_id, refused, error)  # fmt: skip
    report = FileReport(
        name=name,
        kind=kind_of(name) or "unknown",
        status="refused",
        bytes=int(blob.size or 0),
        token=run.writer.token,
        error=str(error),
    )
    with telemetry.import_file(report.kind):
        run.telemetry.end_file(report)
    return report


def _import_file(run: _Run, blob: Any) -> FileReport:
    with telemetry.import_file(kind_of(run.layout.file_name(blob.name)), ok=(_OutOfTime,)):
        return _import_one_file(run, blob)


def _import_one_file(run: _Run, blob: Any) -> FileReport:
    """One incoming file, or (`blob` a `_Database`) the account's database source."""
    kind: str | None
    if isinstance(blob, _Database):
        name, kind = blob.name, DATABASE
    else:
        name = run.layout.file_name(blob.name)
        kind = kind_of(name)
    saved = run.saved
    resumed = saved.get("file") == name and saved.get("etag") == str(blob.etag or "")
    result = FileReport(name=name, kind=kind or "unknown", bytes=int(blob.size or 0),
                        token=run.writer.token)  # fmt: skip
    if resumed and saved.get("report"):
        result = FileReport.from_dict(saved["report"])
        result.token = run.writer.token
    run.telemetry.begin_file(result)
    started = time.monotonic() - result.duration_s
    run.ack = None
    try:
        if kind is None:
            raise SourceFileError("unsupported file type (expected .csv, .834, .x12 or .edi)")
        if result.bytes > run.config.max_file_bytes:
            raise _TooBig(f"file: {result.bytes} bytes, more than IMPORT_MAX_FILE_BYTES="
                          f"{run.config.max_file_bytes}: not read")  # fmt: skip
        _import_records(run, blob, kind, result, saved if resumed else {}, started)
    except SourceFileError as error:
        run.writer.discard()
        _reject_whole_file(run, blob, result, str(error), too_big=isinstance(error, _TooBig))
    except (file_mover.SourceChanged, ResourceModifiedError):
        run.writer.discard()
        result.status = "changed"
        result.error = "replaced during the import; the new version is left in incoming"
        log.warning("import %s/%s: %s changed during the import; left in incoming",
                    run.request.account, run.request.run_id, name)  # fmt: skip
    result.duration_s = round(time.monotonic() - started, 3)
    run.checkpoint.save({"file": None, "done": name})
    run.telemetry.end_file(result)
    run.progressed = True
    return result


def _import_database(run: _Run) -> FileReport | None:
    """The account's database source (`db_reader.py`), after its incoming files: None when it
    has none, or an earlier attempt of this run read it to its end.

    Its settings are read and its table reflected (every mapped column present) before any
    of its rows is read or written; a bad setting, a missing column, an unreachable host or
    a refused login fail the source at once with the reason (status "failed", the run's
    status "failed": the next trigger tries again, nothing is retried in a loop). A read
    that breaks off after rows were read resumes from the last checkpointed page
    (DATABASE_RETRY_PAUSES_S), as a new invocation would; the rows before stay imported."""
    account = run.request.account
    try:
        source = database_source(account)
    except InvalidSetting as error:
        return _database_failed(run, DATABASE, str(error))
    if source is None:
        return None
    if any(f.name == source.name for f in run.report.files):
        return None  # an earlier attempt of this run finished it
    if run.out_of_time():
        raise _OutOfTime
    with telemetry.import_file(DATABASE, ok=(_OutOfTime,)):
        for pause in (*DATABASE_RETRY_PAUSES_S, None):
            try:
                engine = engine_for(source)
                run.database = _Database(source, engine)
                table = check_columns(engine, source)
                run.database = _Database(source, engine, table)
                return _import_one_file(run, run.database)
            except SourceFileError as error:  # a column gone: refused before any write
                return _database_failed(run, source.name, str(error))
            except SourceUnavailable as error:
                run.writer.discard()
                if not error.rows or pause is None:
                    return _database_failed(run, source.name, error.reason)
                log.warning("import %s/%s: %s: read broke off after %d row(s) (%s); reading "
                            "again from the last checkpoint in %.0f s", account,
                            run.request.run_id, source.name, error.rows, error.reason,
                            pause)  # fmt: skip
                time.sleep(pause)
                run.saved = dict(run.checkpoint.data)
            except ValueError as error:  # an AUTH=entra URL of another backend
                return _database_failed(run, source.name, str(error))
    raise AssertionError("unreachable")  # pragma: no cover


def _database_failed(run: _Run, name: str, reason: str) -> FileReport:
    """The database source could not be read this run: the report says why (no password in
    it: reasons come from `db_config` and `db_engine.describe_error`)."""
    log.warning("import %s/%s: %s failed: %s", run.request.account, run.request.run_id, name,
                reason)  # fmt: skip
    result = FileReport(name=name, kind=DATABASE, status="failed", token=run.writer.token,
                        error=reason)  # fmt: skip
    run.telemetry.end_file(result)
    return result


class _TooBig(SourceFileError):
    """The file is over IMPORT_MAX_FILE_BYTES: rejected unread."""


def _reader(
    run: _Run, blob: Any, kind: str, facts: FileFacts, resume: dict[str, Any] | None
) -> Iterator[SourceRecord]:
    """The file's records from `resume` (None: the top), by a range read from its offset."""
    if kind == DATABASE:
        assert run.database is not None
        return read_rows(run.database.engine, run.database.source, run.database.table, resume)
    offset = int(resume["offset"]) if resume else 0
    text = open_text(container_name(), blob.name, blob.etag, run.connection, offset=offset,
                     size=int(blob.size or 0))  # fmt: skip
    if kind == "csv":
        return read_csv(text, resume)
    return read_834(text, facts, resume, limits=run.limits, ack=run.ack)


def _ack_writer(run: _Run, result: FileReport, key_of_file: str, *, rejecting: bool,
                state: dict[str, Any] | None) -> AckWriter:  # fmt: skip
    """The acknowledgment of the 834 `result.name` (see `acks.py`), from `state` (a
    checkpoint's) if there is one."""
    container, layout = run.container, run.layout
    return AckWriter(lambda kind: container.get_blob_client(layout.ack(result.name, kind)),
                     key_of_file, rejecting=rejecting, state=state)  # fmt: skip


class _Counter:
    """True from the `limit`+1st call on: where an envelope pass may stop for a checkpoint."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.calls = 0

    def __call__(self) -> bool:
        self.calls += 1
        return self.calls > self.limit


#: Envelope problems a checkpoint keeps (the reason quotes 5 and counts the rest).
MAX_KEPT_PROBLEMS = 5
#: Envelope problems after which the envelope pass stops reading: the file is rejected whole
#: anyway, and junk has one per segment (`x12.reader.scan_envelope`'s `max_problems`).
MAX_ENVELOPE_PROBLEMS = 100


def _check_envelope(run: _Run, blob: Any, state: dict[str, Any]) -> None:
    """An 834's first pass, checkpointed every `chunk_records` member loops; raises
    `SourceFileError` if the envelope is broken, `_OutOfTime` when the budget is spent."""
    problems: list[str] = list(state.get("problems") or [])
    count = int(state.get("problem_count", 0))
    resume = state.get("resume")
    while True:
        stop = _Counter(run.chunk_records)
        offset = int(resume["offset"]) if resume else 0
        text = open_text(container_name(), blob.name, blob.etag, run.connection, offset=offset,
                         size=int(blob.size or 0))  # fmt: skip
        found, resume = scan_envelope(text, resume, stop, limits=run.limits, ack=run.ack,
                                      max_problems=MAX_ENVELOPE_PROBLEMS - count)  # fmt: skip
        problems = (problems + found)[:MAX_KEPT_PROBLEMS]
        count += len(found)
        if resume is None or count >= MAX_ENVELOPE_PROBLEMS:
            break
        ack = None
        if run.ack is not None:  # what the scan read from this INS on, it reads again
            ack = run.ack.stage(until=int(resume["segment"]))
            run.ack.rewind(int(resume["segment"]))
        state.update(phase="envelope", resume=resume, problems=problems, problem_count=count,
                     ack=ack)  # fmt: skip
        run.checkpoint.save(state)
        run.telemetry.checkpoint("envelope")
        run.progressed = True
        if run.out_of_time():
            raise _OutOfTime
    if count:
        extra = f"; {count - 5} more" if count > 5 else ""
        if count >= MAX_ENVELOPE_PROBLEMS:
            extra += " (not read further)"
        raise SourceFileError("X12 envelope errors: " + "; ".join(problems[:5]) + extra)
    state.update(phase="members", resume=None, next_record=0, problems=[], problem_count=0,
                 ack=None)  # fmt: skip


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
            # past MAX_AUDIT_REJECTS the sweep is skipped anyway: ids no longer kept (the
            # checkpoint carries them; a family refused member by member has thousands)
            if len(self.rejected_ids) <= MAX_AUDIT_REJECTS:
                self.rejected_ids.add(record.member_id)
        elif rejected:
            self.rejected_without_id += 1

    def to_dict(self) -> dict[str, Any]:
        return {"members": self.members, "audit_loops": self.audit_loops,
                "rejected_ids": sorted(self.rejected_ids),
                "rejected_without_id": self.rejected_without_id}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> _Audit:
        data = data or {}
        return cls(int(data.get("members", 0)), int(data.get("audit_loops", 0)),
                   set(data.get("rejected_ids") or ()),
                   int(data.get("rejected_without_id", 0)))  # fmt: skip

    def skip_reason(self) -> str | None:
        if self.members == 0 or self.audit_loops != self.members:
            return "not an audit file"
        if self.rejected_without_id:
            return f"{self.rejected_without_id} rejected record(s) without a member id"
        if len(self.rejected_ids) > MAX_AUDIT_REJECTS:
            return f"more than {MAX_AUDIT_REJECTS} rejected records"
        return None


def _import_records(
    run: _Run,
    blob: Any,
    kind: str,
    result: FileReport,
    saved: dict[str, Any],
    started: float,
) -> None:
    """Import one file from its checkpoint (`saved`, {} for the top), chunk by chunk."""
    request, writer = run.request, run.writer
    state: dict[str, Any] = dict(saved) if saved else {
        "file": result.name, "etag": str(blob.etag or ""), "kind": kind,
        "phase": "envelope" if kind == X12 else "members", "resume": None, "next_record": 0,
    }  # fmt: skip
    rejects = RejectWriter.from_checkpoint(
        run.container.get_blob_client(run.layout.rejected_records(result.name)), result.name,
        state.get("rejects"), max_count=run.config.max_rejects,
        max_bytes=run.config.max_reject_bytes,
    )  # fmt: skip
    key_of_file = file_key(request.run_id, result.name, str(blob.etag or ""))
    saved_facts = state.get("facts") or {}
    facts = FileFacts(transaction_sets=int(saved_facts.get("transaction_sets", 0)))
    if saved_facts.get("effective"):
        facts.effective = date.fromisoformat(saved_facts["effective"])
    audit = _Audit.from_dict(state.get("audit"))
    if kind == X12:
        run.ack = _ack_writer(run, result, key_of_file, rejecting=state.get("phase") == "envelope",
                              state=state.get("ack"))  # fmt: skip
    if saved:
        point = state.get("resume") or {}
        where = (f"key {point['key']}" if "key" in point
                 else f"byte {point.get('offset', 0)}")  # fmt: skip
        log.info("resuming run %s of account %s at record %s / %s of %s (%s pass; %d "
                 "records done before; invocation %d of the run)", request.run_id,
                 request.account, state.get("next_record"), where,
                 result.name, state.get("phase"), result.records,
                 int(run.checkpoint.data.get("invocations", 0)))  # fmt: skip
    if state.get("phase") == "envelope":
        _check_envelope(run, blob, state)
        run.ack = _ack_writer(run, result, key_of_file, rejecting=False, state=None)
    if state.get("phase") == "stopped":  # an attempt passed the reject cap, then died
        _stop_file(run, blob, result, rejects, str(state.get("stopped")))
        return
    if state.get("phase") != "sweep":
        try:
            _import_members(run, blob, kind, result, state, rejects, facts, audit,
                            key_of_file, started)  # fmt: skip
        except _RejectsFull as full:
            result.duration_s = round(time.monotonic() - started, 3)
            _save(run, state, result, rejects, facts, audit, phase="stopped", resume=None,
                  stopped=full.reason)  # fmt: skip
            _stop_file(run, blob, result, rejects, full.reason)
            return
        _save(run, state, result, rejects, facts, audit, phase="sweep", resume=None)
    if kind == X12:
        _sweep(run, result, audit, facts, key_of_file)
    rejects.commit()
    writer.confirm()  # the blob effects below are not covered by the table's If-Match
    if run.ack is not None:
        _acknowledged(run, result, run.ack.finish())
    if kind != DATABASE:  # a table stays where it is
        file_mover.move_blob(run.container, blob.name, run.layout.processed(result.name),
                             blob.etag)  # fmt: skip
    result.status = "processed"
    log.info("import %s/%s: %s processed: %d records, %d imported, %d rejected",
             request.account, request.run_id, result.name, result.records, result.imported,
             result.rejected)  # fmt: skip


class _RejectsFull(Exception):
    """A file's rejects would pass IMPORT_MAX_REJECTS or IMPORT_MAX_REJECT_BYTES: the rows
    before the record that would are committed; the file stops there."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _stop_file(run: _Run, blob: Any, result: FileReport, rejects: RejectWriter,
               reason: str) -> None:  # fmt: skip
    """A file stopped at its reject cap (checkpointed as phase "stopped", so an attempt
    that dies in here does this again, not the reading): the records imported before the
    stop stay, its rejects so far are committed, an 834's acknowledgment closes what is
    open as rejected (no audit sweep: the file was not read to its end), and the file goes
    to rejected/ with its reason beside it, to be dropped into incoming/ again once fixed.
    The reason (in the report, the log and the reason blob) holds a location and counts."""
    result.status = "stopped"
    result.error = (f"{reason}; the file was not read further: {result.imported} record(s) "
                    f"imported before it stay imported, {result.rejected} rejected record(s) "
                    "are in the rejected file")  # fmt: skip
    rejects.commit()
    run.writer.confirm()  # the blob effects below are not covered by the table's If-Match
    if run.ack is not None:
        _acknowledged(run, result, run.ack.finish(rejected=True))
    layout = run.layout
    if result.kind != DATABASE:  # a table stays where it is: the report says why it stopped
        file_mover.write_json(run.container, layout.rejected_reason(result.name), {
            "source": result.name, "run_id": run.request.run_id, "reason": result.error,
        })  # fmt: skip
        file_mover.move_blob(run.container, blob.name, layout.rejected_file(result.name),
                             blob.etag)  # fmt: skip
    log.warning("import %s/%s: %s stopped: %s", run.request.account, run.request.run_id,
                result.name, result.error)  # fmt: skip


def _save(
    run: _Run,
    state: dict[str, Any],
    result: FileReport,
    rejects: RejectWriter,
    facts: FileFacts,
    audit: _Audit,
    **changes: Any,
) -> None:
    """Save the checkpoint (after the rows up to it are committed); the acknowledgment as it
    was at its resume point (all of it without one: the file is read)."""
    point = changes.get("resume")
    ack = None
    if run.ack is not None:
        ack = run.ack.stage(until=int(point["segment"]) if point else None)
    report = asdict(result)
    report["reasons"] = dict(result.reasons)
    effective = facts.effective.isoformat() if facts.effective else None
    state.update(
        rejects=rejects.stage(), report=report, audit=audit.to_dict(),
        facts={"transaction_sets": facts.transaction_sets, "effective": effective},
        ack=ack, **changes,
    )  # fmt: skip
    run.checkpoint.save(state)
    run.telemetry.checkpoint(str(changes.get("phase")), result)


def _next_record(kind: str, resume: dict[str, Any]) -> int:
    """The number of the first record after resume point `resume`."""
    return int(resume["segment"]) if kind == X12 else int(resume["line"]) + 1


def _import_members(
    run: _Run,
    blob: Any,
    kind: str,
    result: FileReport,
    state: dict[str, Any],
    rejects: RejectWriter,
    facts: FileFacts,
    audit: _Audit,
    key_of_file: str,
    file_started: float,
) -> None:
    """The members pass, from `state["resume"]`; a checkpoint every `chunk_records`
    records (at a point the reader can resume from); `_OutOfTime` when the budget is spent."""
    request, writer = run.request, run.writer
    writer.resume_from = int(state.get("next_record") or 0)
    writer.start_chunk(writer.resume_from)
    in_chunk = 0
    next_progress = time.monotonic() + run.progress_every
    started, first = time.monotonic(), result.records
    for record, prepared in _prepared(run, _reader(run, blob, kind, facts, state.get("resume"))):
        if run.ack is not None:
            run.ack.apply_until(record.number)
        origin = Provenance(request.run_id, result.name, record.location, kind)
        outcome = _import_record(run, record, prepared, origin, key_of_file)
        if not isinstance(outcome, str) and not rejects.add(record, outcome[1]):
            writer.flush()  # the records before it stay imported
            if run.ack is not None:  # acknowledged up to this record, not what was read ahead
                run.ack.rewind(record.number)
            raise _RejectsFull(f"stopped at {record.location}: {rejects.passed}")
        result.records += 1
        in_chunk += 1
        if kind == X12:
            audit.add(record, rejected=not isinstance(outcome, str))
        if isinstance(outcome, str):
            result.count(outcome)
        else:
            category, reason = outcome
            result.reject(record.location, record.member_id, category, reason, record.line)
        # a database source's page end: every page is checkpointed with its last key
        if (in_chunk >= run.chunk_records or kind == DATABASE) and record.resume is not None:
            writer.flush()
            point = record.resume
            result.duration_s = round(time.monotonic() - file_started, 3)
            _save(run, state, result, rejects, facts, audit, phase="members", resume=point,
                  next_record=_next_record(kind, point))  # fmt: skip
            writer.start_chunk(state["next_record"])
            in_chunk = 0
            run.progressed = True
            if run.out_of_time():
                raise _OutOfTime
        if time.monotonic() >= next_progress:
            next_progress = time.monotonic() + run.progress_every
            log.info("import %s/%s: %s: %d records, %d imported, %d rejected (%.0f rows/s)",
                     request.account, request.run_id, result.name, result.records,
                     result.imported, result.rejected,
                     (result.records - first) / (time.monotonic() - started))  # fmt: skip
    writer.flush()


def _change_of(record: SourceRecord, today: date) -> Change:
    if record.change is not None:
        return validate_change(record.change, today=today)
    return change_of_row(validate_member(record.fields or {}, today=today))


def _prepare(record: SourceRecord, today: date) -> Change | tuple[str, str]:
    """The record's validated change, or (category, reason) to reject it with."""
    if record.error is not None:
        return record.category, record.error
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
        changes = [c for _, c in window if isinstance(c, Change)]
        run.writer.prefetch([i for c in changes for i in _candidate_ids(c)])
        yield from window


def _candidate_ids(change: Change) -> list[str]:
    """The member ids a change may be written under: its own, and for a dependent without
    an id of its own the id of its values before a 2100B correction."""
    return change.dependent.member_ids() if change.dependent is not None else [change.member_id]


def _resolve_dependent(run: _Run, change: Change, key_of_file: str) -> str | tuple[str, str]:
    """The member a dependent without an id of its own is (`dependents.py`), or (category,
    reason) to reject it with: the row under its derived id; else the row under the id of
    its values before a 2100B correction; else the one of the subscriber's stored
    dependents whose values (as corrected since, or under an older id) give its digest;
    else a new member under its derived id."""
    dependent = change.dependent
    assert dependent is not None
    ids = dependent.member_ids()
    for member_id in ids:
        if run.writer.prior(member_id, key_of_file).member is not None:
            return member_id
    key = run.limits.id_key
    found: set[str] = set()
    for entity in run.writer.dependents_of(dependent.subscriber_id):
        stored = member_from_entity(entity)
        if stored.date_of_birth is None or not stored.first_name:
            continue
        digest = identity_digest(stored.subscriber_id, stored.relationship,
                                 stored.date_of_birth, stored.first_name, key)  # fmt: skip
        if digest in dependent.digests:
            found.add(stored.member_id)
    if len(found) > 1:
        return "member_id", (
            f"member_id: {len(found)} stored dependents of this subscriber have this "
            "dependent's relationship, birth date and first name: it cannot be told which "
            "one it is"
        )
    return found.pop() if found else ids[0]


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
    if change.dependent is not None:
        resolved = _resolve_dependent(run, change, key_of_file)
        if isinstance(resolved, tuple):
            return resolved
        change = replace(change, member_id=resolved)
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
    writer.put(member, origin, key_of_file=key_of_file, base=prior.base, event=event,
               chunk_base=prior.chunk_base)  # fmt: skip
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


def _acknowledged(run: _Run, result: FileReport, outcome: AckOutcome) -> None:
    result.ack = outcome.summary()
    result.acks = outcome.blobs
    log.info("import %s/%s: %s acknowledged: %s", run.request.account, run.request.run_id,
             result.name, result.ack)  # fmt: skip


def _acknowledge_rejection(run: _Run, blob: Any, result: FileReport, reason: str, *,
                           too_big: bool) -> None:  # fmt: skip
    """Acknowledge an 834 rejected whole: what its reading acknowledged so far, closed as
    rejected; or, when no interchange header was read (the file refused unread, or a header
    pyx12 cannot read), a TA1 from the ISA read loosely. No ISA, no acknowledgment."""
    if result.kind != "x12-834":
        return
    ack = None if too_big else run.ack
    outcome = ack.finish(rejected=True) if ack is not None else AckOutcome()
    if outcome.kind is None and outcome.ta1 is None:
        head = open_text(container_name(), blob.name, blob.etag, run.connection,
                         size=int(blob.size or 0)).read(106) if result.bytes else ""  # fmt: skip
        isa = loose_isa(head)
        if isa is not None:
            code = (
                TA1_INVALID_CONTENT
                if too_big
                else TA1_INVALID_VERSION
                if "Version" in reason
                else TA1_INVALID_STRUCTURE
            )
            key = file_key(run.request.run_id, result.name, str(blob.etag or ""))
            name = write_ta1(run.container.get_blob_client(run.layout.ack(result.name, "ta1")),
                             isa, control_number(key), code)  # fmt: skip
            outcome = AckOutcome(ta1=code, blobs=[name])
    _acknowledged(run, result, outcome)


def _reject_whole_file(run: _Run, blob: Any, result: FileReport, reason: str, *,
                       too_big: bool = False) -> None:  # fmt: skip
    """Move the file to rejected/ with its reason next to it (after the fence check), and
    acknowledge its rejection (an 834)."""
    result.status = "rejected"
    result.error = reason
    run.writer.confirm()
    _acknowledge_rejection(run, blob, result, reason, too_big=too_big)
    layout = run.layout
    file_mover.write_json(run.container, layout.rejected_reason(result.name), {
        "source": result.name, "run_id": run.request.run_id, "reason": reason,
    })  # fmt: skip
    file_mover.move_blob(run.container, blob.name, layout.rejected_file(result.name), blob.etag)
    log.warning("import %s/%s: %s rejected as a whole: %s", run.request.account,
                run.request.run_id, result.name, reason)  # fmt: skip
