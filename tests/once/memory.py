"""An in-memory `RecordStore`: the same conditional writes as the blob store, in a dict."""

from __future__ import annotations

import itertools

from blobsingleton import Record, RecordStore
from blobsingleton.errors import RecordConflict


class MemoryRecordStore(RecordStore):
    """Records with etags; a write with a stale etag loses, as `If-Match` does on a blob."""

    def __init__(self) -> None:
        self.records: dict[str, Record] = {}
        self._etags = itertools.count(1)
        self.requests = 0

    def _stamped(self, record: Record) -> Record:
        stamped = record.with_(etag=f'"{next(self._etags)}"')
        self.records[record.key] = stamped
        return stamped

    def get(self, key: str) -> Record | None:
        self.requests += 1
        return self.records.get(key)

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
