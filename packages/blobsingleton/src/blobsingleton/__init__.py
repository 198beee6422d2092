"""Singleton and run-once for Python Azure Functions, on Azure Blob Storage leases.

    from blobsingleton import Busy, current_lease, once, singleton

    @bp.queue_trigger(arg_name="msg", queue_name="%IMPORT_QUEUE%", connection="AzureWebJobsStorage")
    @singleton("import-{account}", busy=Busy.defer(queue="%IMPORT_QUEUE%"))
    def import_account(msg: func.QueueMessage) -> None:
        lease = current_lease()          # fencing token, ensure_held() before side effects

The root holds what a user of the decorators and the lease needs. The rest lives in named
submodules: `errors` (every error), `batches` (what `fn.each(items)` returns), `records`
(run-once records, for a store of your own), `results` (how a result is stored for its
duplicates, for a codec of your own), `leases` (`FairLease`, `LeaseSemaphore`, `BaseLease`,
lock state, process exit), `config` (accounts, clients, namespace, keys), `events`,
`testing` (in-memory backends), `ops`, `schedules` (timer schedules as the host reads them,
for `{occurrence}` keys), `timers` (a timer's ledger, catch-up and overlap policies, late
occurrences).
Modules starting with `_` are private. Importing the library registers nothing: the exit hook
that releases held leases is registered when the process first holds one.
"""

from __future__ import annotations

from blobsingleton._blob_lease import BlobLease
from blobsingleton._busy import Busy, BusyPolicy
from blobsingleton._connection import Storage, StorageAccount
from blobsingleton._once import once
from blobsingleton._once_handler import Mode, current_run
from blobsingleton._singleton import current_lease, singleton
from blobsingleton.errors import (
    AlreadyInProgress,
    BlobSingletonError,
    LeaseLost,
    LeaseTimeout,
    PayloadMismatch,
    RunLost,
)

__version__ = "0.5.0"

__all__ = [
    "AlreadyInProgress", "BlobLease", "BlobSingletonError", "Busy", "BusyPolicy", "LeaseLost",
    "LeaseTimeout", "Mode", "PayloadMismatch", "RunLost", "Storage", "StorageAccount",
    "current_lease", "current_run", "once", "singleton",
]  # fmt: skip
