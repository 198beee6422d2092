"""One `BlobRecordStore` operation in a fresh process (`test_record_store_requests`): argv is
the operation, the key and, for replace and delete, the etag; prints the new etag or the outcome."""

from __future__ import annotations

import sys
import time

from blobsingleton.errors import RecordConflict
from blobsingleton.records import BlobRecordStore, Record, Status


def main(operation: str, key: str, etag: str = "") -> None:
    store = BlobRecordStore(namespace="requests")
    now = time.time()
    record = Record(key=key, status=Status.IN_PROGRESS, started_at=now, expires_at=now + 60,
                    ttl=60.0, claim="counted")  # fmt: skip
    try:
        if operation == "get":
            found = store.get(key)
            print("absent" if found is None else found.etag)
        elif operation == "put_if_absent":
            print(store.put_if_absent(record).etag)
        elif operation == "replace":
            print(store.replace(record.with_(status=Status.COMPLETED), etag).etag)
        else:
            store.delete(key, etag)
            print("deleted")
    except RecordConflict:
        print("conflict")


if __name__ == "__main__":
    main(*sys.argv[1:])
