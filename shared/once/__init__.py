"""Run-once (idempotency) records on Blob Storage: `@once("email-{event_id}")`."""

from shared.once.blob_store import BlobRecordStore
from shared.once.decorator import once
from shared.once.handler import Decision, Mode, OnceHandler, payload_hash
from shared.once.records import (
    AlreadyInProgress,
    OnceError,
    PayloadMismatch,
    Record,
    RecordConflict,
    RecordStore,
    Status,
)

__all__ = [
    "AlreadyInProgress",
    "BlobRecordStore",
    "Decision",
    "Mode",
    "OnceError",
    "OnceHandler",
    "PayloadMismatch",
    "Record",
    "RecordConflict",
    "RecordStore",
    "Status",
    "once",
    "payload_hash",
]
