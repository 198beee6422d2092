"""The nightly fan-out: which accounts to import, for which night, one message each.

Accounts are app setting IMPORT_ACCOUNTS when set, else the top-level folders of the imports
container; and the accounts with a database source (IMPORT_DATABASE_ACCOUNTS). The run date
is the date of the schedule occurrence being fired, taken from the schedule rather than the
instance's clock, so every instance (and a late catch-up run) names the same night.
"""

from __future__ import annotations

import logging
from datetime import date

from azure.core.exceptions import ResourceNotFoundError

from shared import settings, storage
from shared.imports.accounts import configured_accounts, discovered_accounts
from shared.imports.db_config import database_accounts
from shared.imports.layout import imports_container
from shared.imports.request import ImportRequest

log = logging.getLogger("shared.imports")

QUEUE = "%IMPORT_QUEUE%"
SCHEDULE = "%IMPORT_SCHEDULE%"


def accounts_to_import(connection: str = "AzureWebJobsStorage") -> tuple[list[str], int]:
    """(accounts, number of folders skipped because their name is not a valid account).

    The accounts with a database source (IMPORT_DATABASE_ACCOUNTS) are imported every night
    too, whether or not they have a folder."""
    databases = database_accounts()
    configured = configured_accounts()
    if configured is not None:
        return sorted({*configured, *databases}), 0
    try:
        accounts, skipped = discovered_accounts(imports_container(connection))
    except ResourceNotFoundError:
        log.warning("imports container does not exist: no account folders to import")
        return databases, 0
    return sorted({*accounts, *databases}), len(skipped)


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
