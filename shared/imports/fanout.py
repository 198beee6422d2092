"""The nightly fan-out: which accounts to import, for which night, one message each.

Accounts are app setting IMPORT_ACCOUNTS when set, else the top-level folders of the imports
container. The run date is the date of the schedule occurrence being fired, taken from the
schedule rather than the instance's clock, so every instance (and a late catch-up run)
names the same night.
"""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime, timedelta

import azure.functions as func
from azure.core.exceptions import ResourceNotFoundError

from shared import ncrontab, settings, storage
from shared.imports.accounts import configured_accounts, discovered_accounts
from shared.imports.layout import imports_container
from shared.imports.request import ImportRequest

log = logging.getLogger("shared.imports")

QUEUE = "%IMPORT_QUEUE%"
SCHEDULE = "%IMPORT_SCHEDULE%"
#: A timer may fire a little before its occurrence (clock skew); the host allows for ~1 s.
EARLY_FIRE = timedelta(seconds=60)


def fired_occurrence(
    timer: func.TimerRequest, schedule: str, now: datetime | None = None
) -> datetime:
    """The schedule occurrence this invocation stands for (UTC).

    During an invocation the host's ScheduleStatus.Next is the occurrence now firing (it is
    advanced only after the run), and for a past-due catch-up it is the missed occurrence.
    A Next still in the future belongs to some other schedule (status written before the
    schedule changed), so the latest occurrence at or before now is used instead.
    """
    now = now or datetime.now(UTC)
    status = timer.schedule_status or {}
    text = status.get("Next") if isinstance(status, dict) else None
    if text:
        moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
        moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
        if moment <= now + EARLY_FIRE:
            return moment.astimezone(UTC)
    return ncrontab.previous_occurrence(schedule, now).astimezone(UTC)


def accounts_to_import(connection: str = "AzureWebJobsStorage") -> tuple[list[str], int]:
    """(accounts, number of folders skipped because their name is not a valid account)."""
    configured = configured_accounts()
    if configured is not None:
        return configured, 0
    try:
        accounts, skipped = discovered_accounts(imports_container(connection))
    except ResourceNotFoundError:
        log.warning("imports container does not exist: no accounts to import")
        return [], 0
    return accounts, len(skipped)


def enqueue_request(request: ImportRequest, connection: str = "AzureWebJobsStorage") -> None:
    """Put one import request on IMPORT_QUEUE (created if missing)."""
    body = request.to_json().encode("utf-8")
    storage.send_message(settings.resolve_placeholders(QUEUE), body, connection=connection)


def enqueue_imports(
    accounts: list[str], run_date: date, connection: str = "AzureWebJobsStorage"
) -> list[ImportRequest]:
    """One nightly import message per account on IMPORT_QUEUE."""
    requests = [ImportRequest.nightly(account, run_date) for account in accounts]
    for request in requests:
        enqueue_request(request, connection)
    return requests
