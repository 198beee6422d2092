"""Blob-lease locks for Azure Functions: like WebJobs `[Singleton]`, with fencing tokens.

from shared.lease import BlobLease

with BlobLease("import-A") as lease:       # really acquires (waits, jittered polling)
    lease.ensure_held()                    # raises LeaseLost before a side effect
    write(data, fencing_token=lease.token)
"""

from shared.lease.base import BaseLease
from shared.lease.blob_lease import BlobLease, read_lock
from shared.lease.errors import (
    InvalidKey,
    LeaseError,
    LeaseLost,
    LeaseNotHeld,
    LeaseTimeout,
    StorageUnavailable,
)
from shared.lease.keys import blob_name, validate_key
from shared.lease.lock_blob import LockState
from shared.lease.owner import Owner
from shared.lease.semaphore import LeaseSemaphore
from shared.lease.shutdown import install_signal_handlers

__all__ = [
    "BaseLease",
    "BlobLease",
    "InvalidKey",
    "LeaseError",
    "LeaseLost",
    "LeaseNotHeld",
    "LeaseSemaphore",
    "LeaseTimeout",
    "LockState",
    "Owner",
    "StorageUnavailable",
    "blob_name",
    "install_signal_handlers",
    "read_lock",
    "validate_key",
]
