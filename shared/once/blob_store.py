"""Run-once records as small block blobs, written with If-None-Match / If-Match."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError, ResourceExistsError

from shared import settings, storage
from shared.lease.keys import blob_name
from shared.once.records import Record, RecordConflict, RecordStore

DEFAULT_CONTAINER = "runonce"
_CONFLICT_CODES = frozenset({"BlobAlreadyExists", "ConditionNotMet", "BlobNotFound"})


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    """Lost races become `RecordConflict`, decided by `error_code`; anything else propagates."""
    try:
        yield
    except HttpResponseError as error:
        code = str(getattr(error.error_code, "value", error.error_code) or "")
        if code in _CONFLICT_CODES or error.status_code == 412:
            raise RecordConflict(code or str(error.status_code)) from error
        raise


class BlobRecordStore(RecordStore):
    """Records in container `container` (app setting RUNONCE_CONTAINER, default "runonce")."""

    def __init__(self, container: str | None = None, connection: str = "AzureWebJobsStorage"):
        name = container or settings.setting("RUNONCE_CONTAINER", DEFAULT_CONTAINER)
        self._container = storage.blob_service(connection).get_container_client(name)

    def _blob(self, key: str) -> Any:
        return self._container.get_blob_client(blob_name("", key))

    def get(self, key: str) -> Record | None:
        try:
            with _translated():
                download = self._blob(key).download_blob()
                raw = download.readall()
        except RecordConflict:
            return None
        except HttpResponseError as error:
            if getattr(error, "error_code", None) == "ContainerNotFound":
                return None
            raise
        return Record.from_json(raw, download.properties.etag)

    def put_if_absent(self, record: Record) -> Record:
        try:
            with _translated():
                props = self._blob(record.key).upload_blob(record.to_json(), overwrite=False)
        except HttpResponseError as error:
            if getattr(error, "error_code", None) != "ContainerNotFound":
                raise
            with contextlib.suppress(ResourceExistsError):
                self._container.create_container()
            with _translated():
                props = self._blob(record.key).upload_blob(record.to_json(), overwrite=False)
        return record.with_(etag=props["etag"])

    def replace(self, record: Record, etag: str) -> Record:
        with _translated():
            props = self._blob(record.key).upload_blob(
                record.to_json(),
                overwrite=True,
                etag=etag,
                match_condition=MatchConditions.IfNotModified,
            )
        return record.with_(etag=props["etag"])

    def delete(self, key: str, etag: str) -> None:
        with _translated():
            self._blob(key).delete_blob(etag=etag, match_condition=MatchConditions.IfNotModified)
