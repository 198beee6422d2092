"""Run-once records as small block blobs, written with If-None-Match / If-Match."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError

from blobsingleton import _defaults
from blobsingleton._connection import StorageAccount
from blobsingleton._keys import blob_name
from blobsingleton._records import Record, RecordStore
from blobsingleton._storage import error_code, retry_on_missing_container, unavailable_as
from blobsingleton.errors import RecordConflict

if TYPE_CHECKING:
    from azure.storage.blob import BlobClient, ContainerClient

_CONFLICT_CODES = frozenset({"BlobAlreadyExists", "ConditionNotMet", "BlobNotFound"})


@contextlib.contextmanager
def _translated(operation: str) -> Iterator[None]:
    """Lost races become `RecordConflict`, no answer `StorageUnavailable`, by `error_code`."""
    try:
        with unavailable_as(operation):
            yield
    except HttpResponseError as error:
        code = error_code(error)
        if code in _CONFLICT_CODES or error.status_code == 412:
            raise RecordConflict(code or str(error.status_code)) from error
        raise


class BlobRecordStore(RecordStore):
    """Records in `container` (default: app setting RUNONCE_CONTAINER, else "runonce")."""

    def __init__(
        self, container: ContainerClient | None = None, storage: StorageAccount | None = None
    ) -> None:
        self._container = _defaults.container(container, _defaults.RECORD_CONTAINER, storage)

    def _blob(self, key: str) -> BlobClient:
        return self._container.get_blob_client(blob_name("", key))

    def get(self, key: str) -> Record | None:
        try:
            with _translated("read run-once record"):
                download = self._blob(key).download_blob()
                raw = download.readall()
        except RecordConflict:
            return None
        except HttpResponseError as error:
            if error_code(error) == "ContainerNotFound":
                return None
            raise
        return Record.from_json(raw, download.properties.etag)

    def put_if_absent(self, record: Record) -> Record:
        blob = self._blob(record.key)
        with _translated("create run-once record"):
            props = retry_on_missing_container(
                self._container, lambda: blob.upload_blob(record.to_json(), overwrite=False)
            )
        return record.with_(etag=str(props["etag"]))

    def replace(self, record: Record, etag: str) -> Record:
        with _translated("update run-once record"):
            props = self._blob(record.key).upload_blob(
                record.to_json(),
                overwrite=True,
                etag=etag,
                match_condition=MatchConditions.IfNotModified,
            )
        return record.with_(etag=str(props["etag"]))

    def delete(self, key: str, etag: str) -> None:
        with _translated("delete run-once record"):
            self._blob(key).delete_blob(etag=etag, match_condition=MatchConditions.IfNotModified)
