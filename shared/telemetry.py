"""The app's spans and metrics, through the OpenTelemetry API only: every instrument is here.

Nothing is recorded until an SDK is configured (`shared.telemetry_setup`, at start-up, from
app settings); without one each call below is the API's no-op. docs/telemetry.md says what
each name means and how to query it in Application Insights.

    app.imports.records      counter  records whose chunk was committed: outcome imported |
                                      rejected (+ account, only for IMPORT_ACCOUNTS' accounts)
    app.imports.files        counter  files (and database sources) finished: status processed |
                                      rejected | changed | refused | failed, kind csv | x12-834
                                      | database | unknown
    app.imports.checkpoints  counter  checkpoints saved: phase envelope | members | sweep
    app.imports.resumes      counter  invocations that carried a run on from its checkpoint
    app.imports.runs         counter  invocations of a run by how they ended: completed |
                                      continued | stale | failed (a database source failed)
    app.jobs.completed       counter  jobs whose outcome was recorded: status succeeded | failed
    app.jobs.announced       counter  callbacks recorded: state delivered | refused | abandoned
    app.emails               counter  notification deliveries: outcome sent | duplicate |
                                      deferred | failed | rejected (+ provider for sent)

    span "import run"   one invocation of one account's run (under the library's
                        "once import-{request.account}-{request.run_id}" span)
    span "import file"  one file of it

Metric attributes are few and bounded: outcomes, statuses, kinds, and an account id only
when IMPORT_ACCOUNTS lists the accounts (a fixed set); never a key, a job id, an event id, a
file name or anything of a member. Spans carry the ids an operator looks a run up by.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics, trace
from opentelemetry.trace import Span, Status, StatusCode

if TYPE_CHECKING:
    from shared.imports.report import FileReport, RunReport
    from shared.jobs.records import Completion

_tracer = trace.get_tracer("app")
_meter = metrics.get_meter("app")

IMPORT_RECORDS = _meter.create_counter("app.imports.records", unit="{record}")
IMPORT_FILES = _meter.create_counter("app.imports.files", unit="{file}")
IMPORT_CHECKPOINTS = _meter.create_counter("app.imports.checkpoints", unit="{checkpoint}")
IMPORT_RESUMES = _meter.create_counter("app.imports.resumes", unit="{invocation}")
IMPORT_RUNS = _meter.create_counter("app.imports.runs", unit="{invocation}")
JOBS_COMPLETED = _meter.create_counter("app.jobs.completed", unit="{job}")
JOBS_ANNOUNCED = _meter.create_counter("app.jobs.announced", unit="{job}")
EMAILS = _meter.create_counter("app.emails", unit="{email}")


def annotate(flow: str, **attributes: Any) -> None:
    """Set `app.{flow}.*` attributes on the current span (None values left out)."""
    current = trace.get_current_span()
    if not current.is_recording():
        return
    for name, value in attributes.items():
        if value is not None:
            current.set_attribute(f"app.{flow}.{name}", value)


# -- imports ---------------------------------------------------------------------------------


class ImportTelemetry:
    """One invocation of one account's run: its span, and what its checkpoints committed.

    Records are counted when their chunk's checkpoint is saved (and when the file ends), as
    the difference from what the previous checkpoint had counted: a chunk redone after a
    crash was never counted, so every record counts once, as in the run report."""

    def __init__(self, account: str, accounts: list[str] | None) -> None:
        #: The metric attributes of this account: its id only when it is one of a fixed set.
        self.attributes: dict[str, str] = (
            {"account": account} if accounts is not None and account in accounts else {}
        )
        self._counted: dict[str, tuple[int, int]] = {}

    def begin_file(self, report: FileReport) -> None:
        """A file starts in this invocation; its counts so far were counted by earlier ones."""
        self._counted[report.name] = (report.imported, report.rejected)

    def checkpoint(self, phase: str, report: FileReport | None = None) -> None:
        """A checkpoint was saved (its rows committed): count what it added."""
        IMPORT_CHECKPOINTS.add(1, {"phase": phase})
        if report is not None:
            self.commit(report)

    def commit(self, report: FileReport) -> None:
        imported, rejected = self._counted.get(report.name, (0, 0))
        if report.imported > imported:
            IMPORT_RECORDS.add(report.imported - imported,
                               {**self.attributes, "outcome": "imported"})  # fmt: skip
        if report.rejected > rejected:
            IMPORT_RECORDS.add(report.rejected - rejected,
                               {**self.attributes, "outcome": "rejected"})  # fmt: skip
        self._counted[report.name] = (report.imported, report.rejected)

    def end_file(self, report: FileReport) -> None:
        self.commit(report)
        IMPORT_FILES.add(1, {"status": report.status, "kind": report.kind})
        annotate("import", file_kind=report.kind, file_status=report.status,
                 file_bytes=report.bytes, records=report.records, imported=report.imported,
                 rejected=report.rejected)  # fmt: skip

    def resumed(self, invocation: int) -> None:
        """This invocation carries the run on from an earlier one's checkpoint."""
        IMPORT_RESUMES.add(1)
        annotate("import", resumed=True, invocation=invocation)

    def ended(self, report: RunReport) -> None:
        IMPORT_RUNS.add(1, {"status": report.status})
        annotate("import", status=report.status, files=len(report.files),
                 records=report.records, imported=report.imported,
                 rejected=report.rejected)  # fmt: skip


@contextlib.contextmanager
def span(name: str, ok: tuple[type[BaseException], ...] = ()) -> Iterator[Span]:
    """A span named `name`, child of the current one. An exception marks it failed with the
    exception's type only (messages may quote what a file held), unless it is one of `ok`
    (control flow, such as an invocation's budget running out)."""
    with _tracer.start_as_current_span(
        name, record_exception=False, set_status_on_exception=False
    ) as current:
        try:
            yield current
        except ok:
            raise
        except BaseException as error:
            current.set_status(Status(StatusCode.ERROR, type(error).__name__))
            raise


@contextlib.contextmanager
def import_run(account: str, run_id: str, trigger: str, token: int) -> Iterator[None]:
    """The span of one invocation of a run (ids only: the account, the run, the token)."""
    with span("import run"):
        annotate("import", account=account, run_id=run_id, trigger=trigger, token=token)
        yield


@contextlib.contextmanager
def import_file(kind: str | None, ok: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """The span of one file of a run (its kind; never its name)."""
    with span("import file", ok):
        annotate("import", file_kind=kind or "unknown")
        yield


# -- batch jobs ------------------------------------------------------------------------------


def job_completed(completion: Completion) -> None:
    """The job's outcome was just recorded (by the one caller that created it)."""
    JOBS_COMPLETED.add(1, {"status": str(completion.status)})
    annotate(
        "job",
        id=completion.job_id,
        completed=str(completion.status),
        units_done=completion.units_done,
        units_failed=completion.units_failed,
    )


def job_announced(job_id: str, state: str) -> None:
    """How the job's callback went was just recorded."""
    JOBS_ANNOUNCED.add(1, {"state": state})
    annotate("job", id=job_id, announced=state)


# -- notification emails ---------------------------------------------------------------------

EMAIL_OUTCOMES = ("sent", "duplicate", "deferred", "failed", "rejected")


def email(outcome: str, provider: str | None = None) -> None:
    """One delivery of a notification message, by what came of it."""
    attributes = {"outcome": outcome}
    if provider is not None:
        attributes["provider"] = provider
    EMAILS.add(1, attributes)
    annotate("email", outcome=outcome, provider=provider)
