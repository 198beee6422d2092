"""Run-once records, for a store of your own: implement `RecordStore`'s four operations.
`@once(storage=...)` takes any `RecordStore`; `BlobRecordStore` is the default one, on blobs."""

from blobsingleton._blob_records import BlobRecordStore
from blobsingleton._records import Record, RecordStore, Status

__all__ = ["BlobRecordStore", "Record", "RecordStore", "Status"]
