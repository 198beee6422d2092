"""An in-memory `RecordStore`: the same conditional writes as the blob store, in a dict.

Its `clock` is storage's clock: records carry `written_at` and `read_at` from it, as the blob
store's come from the service's `Last-Modified` and `Date`.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

from blobsingleton.errors import RecordConflict
from blobsingleton.records import Record, RecordStore


class MemoryRecordStore(RecordStore):
    """Records with etags; a write with a stale etag loses, as `If-Match` does on a blob."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.records: dict[str, Record] = {}
        self._etags = itertools.count(1)
        self.requests = 0

    def _stamped(self, record: Record) -> Record:
        now = self.clock()
        stamped = record.with_(etag=f'"{next(self._etags)}"', written_at=now, read_at=now)
        self.records[record.key] = stamped
        return stamped

    def get(self, key: str) -> Record | None:
        self.requests += 1
        record = self.records.get(key)
        return None if record is None else record.with_(read_at=self.clock())

    def put_if_absent(self, record: Record) -> Record:
        self.requests += 1
        if record.key in self.records:
            raise RecordConflict("BlobAlreadyExists")
        return self._stamped(record)

    def replace(self, record: Record, etag: str) -> Record:
        self.requests += 1
        current = self.records.get(record.key)
        if current is None or current.etag != etag:
            raise RecordConflict("ConditionNotMet")
        return self._stamped(record)

    def delete(self, key: str, etag: str) -> None:
        self.requests += 1
        current = self.records.get(key)
        if current is None or current.etag != etag:
            raise RecordConflict("ConditionNotMet")
        del self.records[key]
