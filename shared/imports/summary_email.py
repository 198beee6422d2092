"""One summary email per account per run, through the run-once notification path.

The import enqueues a notification message (see shared.notifications.message) with
event_id `import-{account}-{run_id}`; the notifications function sends each event id once,
so a retried or taken-over run cannot email twice. Recipients: app setting
IMPORT_REPORT_TO (comma-separated); unset means no email. The text holds counts (members
added, changed, terminated, reinstated, unchanged; records rejected) and blob names only, no
member data.

Subject and text are a function of the run's outcome only (account, run, trigger, status,
file counts and errors, the report blob's name), never of the attempt that sends them (no
duration, token, instance or clock: the report blob has those). A re-run of a run whose
summary went out (a crash between the enqueue and the run-once completion) renders the same
notification, a true duplicate of the same event id: one email per run. The notifications
function poisons a different notification under a used id, so nothing volatile may go in.
"""

from __future__ import annotations

import logging

from shared import settings, storage
from shared.imports.keys import summary_event_id
from shared.imports.report import RunReport
from shared.notifications.message import Notification

log = logging.getLogger("shared.imports")

QUEUE = "%NOTIFICATIONS_QUEUE%"


def recipients() -> list[str]:
    raw = settings.setting("IMPORT_REPORT_TO") or ""
    return [part.strip() for part in raw.split(",") if part.strip()]


def summary_notification(report: RunReport, report_blob: str, to: list[str]) -> Notification:
    totals = report.to_dict()["totals"]
    lines = [
        f"Import of account {report.account}, run {report.run_id} ({report.trigger}): "
        f"{report.status}.",
        "",
        f"Files: {totals['files']} ({totals['files_processed']} processed, "
        f"{totals['files_rejected']} rejected as a whole, "
        f"{totals['files_stopped']} stopped at the reject cap, "
        f"{totals['files_left_in_incoming']} left in incoming, "
        f"{totals['files_refused']} refused by name)",
        f"Acknowledgments: {totals['acks_written']} written ({totals['acks_accepted']} "
        f"accepted, {totals['acks_accepted_with_errors']} accepted with errors, "
        f"{totals['acks_rejected']} rejected; {totals['acks_ta1']} TA1)",
        f"Records: {totals['records']}; imported {totals['imported']}; "
        f"rejected {totals['rejected']}",
        f"Members: {totals['added']} added, {totals['changed']} changed, "
        f"{totals['terminated']} terminated, {totals['reinstated']} reinstated, "
        f"{totals['unchanged']} unchanged; {totals['rejected']} rejected",
        "",
    ]
    for f in report.files:
        line = (
            f"- {f.name} ({f.kind}): {f.status}, {f.added} added, {f.changed} changed, "
            f"{f.terminated} terminated, {f.reinstated} reinstated, {f.rejected} rejected"
        )
        lines.append(
            line
            + (f" ({f.error})" if f.error else "")
            + (f"; acknowledged: {f.ack}" if f.ack else "")
        )
        if f.audit:
            lines.append(f"  {f.audit}")
    lines += ["", f"Report: {report_blob}"]
    return Notification(
        event_id=summary_event_id(report.account, report.run_id),
        type="import.summary",
        to=tuple(to),
        subject=(
            f"Import {report.account} {report.run_id}: {totals['imported']} imported "
            f"({totals['added']} added, {totals['changed']} changed, "
            f"{totals['terminated']} terminated, {totals['reinstated']} reinstated), "
            f"{totals['rejected']} rejected"
        ),
        text="\n".join(lines),
    )


def enqueue_summary(
    report: RunReport, report_blob: str, connection: str = "AzureWebJobsStorage"
) -> bool:
    """Enqueue the summary email; False when no recipients are configured."""
    to = recipients()
    if not to:
        log.info("import %s/%s: IMPORT_REPORT_TO unset, no summary email", report.account,
                 report.run_id)  # fmt: skip
        return False
    notification = summary_notification(report, report_blob, to)
    body = notification.to_json().encode("utf-8")
    storage.send_message(settings.resolve_placeholders(QUEUE), body, connection=connection)
    return True
