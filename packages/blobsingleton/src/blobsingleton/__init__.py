"""Singleton and run-once for Python Azure Functions, on Azure Blob Storage leases.

    from blobsingleton import Busy, current_lease, once, singleton

    @bp.queue_trigger(arg_name="msg", queue_name="%IMPORT_QUEUE%", connection="AzureWebJobsStorage")
    @singleton("import-{account}", on_busy=Busy.DEFER, queue="%IMPORT_QUEUE%")
    def import_account(msg: func.QueueMessage) -> None:
        lease = current_lease()          # fencing token, ensure_held() before side effects

Everything importable from here is the public API; modules starting with `_` are not.
"""

import atexit

from blobsingleton._blob_lease import BlobLease, read_lock
from blobsingleton._blob_records import BlobRecordStore
from blobsingleton._busy import Busy
from blobsingleton._connection import (
    StorageAccount,
    from_settings,
    set_client_options,
    set_default_credential,
)
from blobsingleton._events import emit as emit_event
from blobsingleton._keys import blob_name, encode_key, validate_key
from blobsingleton._lease import BaseLease
from blobsingleton._lock_blob import LockState
from blobsingleton._namespace import host_id, namespace
from blobsingleton._once import current_run, once
from blobsingleton._once_handler import Mode
from blobsingleton._owner import Owner, instance_id
from blobsingleton._records import Record, RecordStore, Status
from blobsingleton._semaphore import LeaseSemaphore
from blobsingleton._shutdown import install_signal_handlers, release_all
from blobsingleton._singleton import current_lease, singleton
from blobsingleton.errors import (
    AlreadyInProgress,
    BlobSingletonError,
    InvalidKey,
    KeyTemplateError,
    LeaseError,
    LeaseLost,
    LeaseNotHeld,
    LeaseTimeout,
    OnceError,
    OutsideGuardedCall,
    PayloadMismatch,
    RecordConflict,
    RunLost,
    SettingMissing,
    StorageUnavailable,
)

__version__ = "0.3.0"

# A normal interpreter exit (the worker ending its stream, Ctrl-C under `func start`) releases
# what this process holds, so a waiter takes over at once. The Functions host disposes a
# Python worker with Process.Kill after draining, which no handler survives: there the
# release at the end of each invocation is what hands over.
atexit.register(release_all)

__all__ = [
    "AlreadyInProgress",
    "BaseLease",
    "BlobLease",
    "BlobRecordStore",
    "BlobSingletonError",
    "Busy",
    "InvalidKey",
    "KeyTemplateError",
    "LeaseError",
    "LeaseLost",
    "LeaseNotHeld",
    "LeaseSemaphore",
    "LeaseTimeout",
    "LockState",
    "Mode",
    "OnceError",
    "OutsideGuardedCall",
    "Owner",
    "PayloadMismatch",
    "Record",
    "RecordConflict",
    "RecordStore",
    "RunLost",
    "SettingMissing",
    "Status",
    "StorageAccount",
    "StorageUnavailable",
    "__version__",
    "blob_name",
    "current_lease",
    "current_run",
    "emit_event",
    "encode_key",
    "from_settings",
    "host_id",
    "install_signal_handlers",
    "instance_id",
    "namespace",
    "once",
    "read_lock",
    "release_all",
    "set_client_options",
    "set_default_credential",
    "singleton",
    "validate_key",
]
