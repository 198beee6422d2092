"""Singleton and run-once for Python Azure Functions, on Azure Blob Storage leases.

    from blobsingleton import Busy, current_lease, once, singleton

    @bp.queue_trigger(arg_name="msg", queue_name="%IMPORT_QUEUE%", connection="AzureWebJobsStorage")
    @singleton("import-{account}", on_busy=Busy.DEFER, queue="%IMPORT_QUEUE%")
    def import_account(msg: func.QueueMessage) -> None:
        lease = current_lease()          # fencing token, ensure_held() before side effects

The root holds what a user of the decorators and the lease needs. The rest lives in named
submodules: `errors` (every error), `records` (run-once records, for a store of your own),
`leases` (`BaseLease`, lock state, process exit), `config` (accounts, clients, namespace,
keys), `events`, `testing` (in-memory backends), `ops`, `schedules`, `queues`, `settings`.
Modules starting with `_` are private.
"""

from __future__ import annotations

import atexit
import warnings
from typing import Any

from blobsingleton._blob_lease import BlobLease
from blobsingleton._busy import Busy
from blobsingleton._connection import StorageAccount
from blobsingleton._once import current_run, once
from blobsingleton._once_handler import Mode
from blobsingleton._semaphore import LeaseSemaphore
from blobsingleton._shutdown import release_all as _release_all
from blobsingleton._singleton import current_lease, singleton
from blobsingleton.errors import (
    AlreadyInProgress,
    BlobSingletonError,
    LeaseLost,
    LeaseTimeout,
    PayloadMismatch,
    RunLost,
)

__version__ = "0.3.0"

# A normal interpreter exit (the worker ending its stream, Ctrl-C under `func start`) releases
# what this process holds, so a waiter takes over at once. The Functions host disposes a
# Python worker with Process.Kill after draining, which no handler survives: there the
# release at the end of each invocation is what hands over.
atexit.register(_release_all)

__all__ = [
    "AlreadyInProgress",
    "BlobLease",
    "BlobSingletonError",
    "Busy",
    "LeaseLost",
    "LeaseSemaphore",
    "LeaseTimeout",
    "Mode",
    "PayloadMismatch",
    "RunLost",
    "StorageAccount",
    "__version__",
    "current_lease",
    "current_run",
    "once",
    "singleton",
]

#: Names 0.2 exported from the root, and where they live now (importable from here still,
#: with a DeprecationWarning, until 1.0).
_MOVED = {
    **dict.fromkeys(
        ("InvalidKey", "KeyTemplateError", "LeaseError", "LeaseNotHeld", "OnceError",
         "OutsideGuardedCall", "RecordConflict", "SettingMissing", "StorageUnavailable"),
        "blobsingleton.errors",
    ),
    **dict.fromkeys(
        ("BlobRecordStore", "Record", "RecordStore", "Status"), "blobsingleton.records"
    ),
    **dict.fromkeys(
        ("BaseLease", "LockState", "Owner", "install_signal_handlers", "instance_id",
         "read_lock", "release_all"),
        "blobsingleton.leases",
    ),
    **dict.fromkeys(
        ("blob_name", "encode_key", "from_settings", "host_id", "namespace",
         "set_client_options", "set_default_credential", "validate_key"),
        "blobsingleton.config",
    ),
}  # fmt: skip


def __getattr__(name: str) -> Any:
    if name == "emit_event":
        warnings.warn(
            "blobsingleton.emit_event moved: use blobsingleton.events.emit",
            DeprecationWarning,
            stacklevel=2,
        )
        from blobsingleton.events import emit

        return emit
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module 'blobsingleton' has no attribute {name!r}")
    warnings.warn(
        f"blobsingleton.{name} moved: import it from {home}", DeprecationWarning, stacklevel=2
    )
    import importlib

    return getattr(importlib.import_module(home), name)
