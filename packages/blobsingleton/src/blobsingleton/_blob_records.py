"""Run-once records as small block blobs, written with If-None-Match / If-Match.

A record is `{namespace}/{encoded key}` in the records container (see `_namespace`). Its
JSON body is the record; blob metadata carries its `ttl`, and the service's `Last-Modified`
and `Date` headers say when it was written and read, so its expiry is judged in storage's time.
The metadata also carries the record's JSON (`record`, base64, when under 4 KB), so one
listing tells the process's watcher (`_record_watch`) the state of many records: first reads
arriving together, deliveries held while their key is in progress, lost create races. Completed
records it has seen answer later duplicates in the process for a few seconds (`known`).

A write whose answer was lost (the connection broke after the request left, or storage
timed out after applying it) is sent again by the SDK's retry policy, and that copy meets the
first one's result: 409 (`BlobAlreadyExists`) or 412 (`ConditionNotMet`). Taken at its word,
a heartbeat would think its run taken over, and a claim would wait out its own record. So
every write carries an id of its own in the metadata (`write`); when a conflict follows a
retry (the call's `retry_hook` saw one), the blob is read back, and the write is ours if its
id is there (a delete: the blob is gone). A conflict on the first attempt is a real one and
costs no extra request.

Records written before names had a namespace (library 0.2: `{encoded key}` at the container's
root) are still honoured for a window after this namespace first ran (app setting
`BLOBSINGLETON_LEGACY_DAYS`, default 7, the default retention; 0 turns it off): on a miss,
the old name is read and, if present, copied as it is into the namespace, where it keeps
deciding by the expiry it was written with. The window starts at the namespace's marker blob
`{namespace}/.since`, created on first use; it costs one more read per new key while it lasts,
and nothing where the container held no 0.2 record when the namespace began (the marker says
so, after one listing of the container's top level, once per namespace).
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError

from blobsingleton import _defaults
from blobsingleton._connection import StorageAccount
from blobsingleton._keys import blob_name, encode_key
from blobsingleton._namespace import namespace as resolve_namespace
from blobsingleton._record_watch import RecordWatch, record_metadata, watch_for
from blobsingleton._records import Record, RecordStore
from blobsingleton._storage import (
    TIME_RESOLUTION,
    ServiceTime,
    epoch,
    error_code,
    retry_on_missing_container,
    unavailable_as,
)
from blobsingleton.errors import RecordConflict
from blobsingleton.settings import setting

if TYPE_CHECKING:
    from azure.storage.blob import BlobClient, ContainerClient

#: Blob clients a record store keeps (by blob name, oldest dropped first).
_KEPT_CLIENTS = 256
_CONFLICT_CODES = frozenset({"BlobAlreadyExists", "ConditionNotMet", "BlobNotFound"})
#: Metadata naming the write that put the blob's current content there.
WRITE_METADATA = "write"
#: The blob whose Last-Modified says when this namespace first ran (encoded keys never hold '.').
SINCE_MARKER = ".since"
DEFAULT_LEGACY_DAYS = 7.0

# (account url, container, namespace) -> storage time the namespace began, or None when there
# was nothing to honour; read once per process.
_since: dict[tuple[str, str, str], float | None] = {}
_since_lock = threading.Lock()


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


def legacy_window() -> float:
    """Seconds after a namespace began during which 0.2 records (no namespace) are still read."""
    value = setting("BLOBSINGLETON_LEGACY_DAYS")
    return (DEFAULT_LEGACY_DAYS if value is None else float(value)) * 24 * 3600.0


class BlobRecordStore(RecordStore):
    """Records in `container` (default: app setting RUNONCE_CONTAINER, else "runonce"),
    in `namespace` (default: BLOBSINGLETON_NAMESPACE, else the Functions host id)."""

    def __init__(
        self,
        container: ContainerClient | None = None,
        storage: StorageAccount | None = None,
        *,
        namespace: str | None = None,
    ) -> None:
        self._container = _defaults.container(container, _defaults.RECORD_CONTAINER, storage)
        self.namespace = resolve_namespace(namespace)
        self._clients: dict[str, BlobClient] = {}
        self._clients_lock = threading.Lock()
        self._watcher: RecordWatch | None = None
        #: The namespace's identity among processes' caches (a client formats its URL anew
        #: on every read of `url`).
        self._since_key = (self._container.url, self._container.container_name, self.namespace)

    def _blob(self, key: str) -> BlobClient:
        """The key's blob client, kept for the last `_KEPT_CLIENTS` keys: building one costs
        about as much client CPU as a request, and a run writes its record twice or more."""
        name = blob_name(self.namespace, key)
        with self._clients_lock:
            client = self._clients.get(name)
            if client is None:
                if len(self._clients) >= _KEPT_CLIENTS:
                    del self._clients[next(iter(self._clients))]
                client = self._clients[name] = self._container.get_blob_client(name)
            return client

    def get(self, key: str) -> Record | None:
        record, served_at = self._read(self._blob(key))
        if record is not None or served_at is None or not self._legacy_open(served_at):
            self._watch().remember(blob_name(self.namespace, key), record)
            return record
        legacy, _ = self._read(self._container.get_blob_client(encode_key(key)))
        return None if legacy is None else self._adopt(legacy)

    # -- waiting for keys in progress elsewhere (`_record_watch`) ------------------------------
    can_watch = True

    def _watch(self) -> RecordWatch:
        if self._watcher is None:
            self._watcher = watch_for(self._container, self.namespace, self._read_key)
        return self._watcher

    def _read_key(self, key: str) -> Record | None:
        return self._read(self._blob(key))[0]

    def watch(self, key: str, etag: str | None, until: float) -> tuple[bool, Record | None]:
        return self._watch().watch(blob_name(self.namespace, key), key, etag, until)

    def read(self, key: str) -> Record | None:
        """Reads of many keys at the same moment, coalesced by the watcher into one listing
        (a plain `get` while records written before namespaces may still need reading)."""
        if self._legacy_reads():
            return self.get(key)
        return self._watch().read(blob_name(self.namespace, key), key)

    def note_first_look(self, completed: bool) -> None:
        self._watch().note_first_look(completed)

    def create_first(self) -> bool:
        return not self._legacy_reads() and self._watch().create_first()

    def note_create(self, lost: bool) -> None:
        self._watch().note_create(lost)

    def create_delay(self, key: str) -> float:
        return self._watch().create_delay(key)

    def _legacy_reads(self) -> bool:
        return legacy_window() > 0 and self._namespace_began() is not None

    def known(self, key: str) -> Record | None:
        return self._watch().known(blob_name(self.namespace, key))

    def note_run(self, seconds: float) -> None:
        self._watch().note_run(seconds)

    def put_if_absent(self, record: Record) -> Record:
        return self._write(record, "create run-once record", creates=True, overwrite=False)

    def replace(self, record: Record, etag: str) -> Record:
        written = self._write(record, "update run-once record", overwrite=True, etag=etag,
                              match_condition=MatchConditions.IfNotModified)  # fmt: skip
        self._watch().remember(blob_name(self.namespace, record.key), written)
        return written

    def _write(self, record: Record, operation: str, *, creates: bool = False,
               **conditions: Any) -> Record:  # fmt: skip
        """Upload `record` under `conditions` with a write id of its own; a conflict that
        follows one of the SDK's retries is ours when the blob carries that id. `creates`:
        a missing container is created and the write sent once more."""
        blob, body, write = self._blob(record.key), record.to_json(), _write_id()
        retried = _Retried()

        def upload() -> Any:
            metadata = _metadata(record, body, write)
            return blob.upload_blob(body, metadata=metadata, retry_hook=retried, **conditions)

        try:
            with _translated(operation):
                props = retry_on_missing_container(self._container, upload) if creates else upload()
        except RecordConflict:
            landed = self._landed(blob, write) if retried.count else None
            if landed is None:
                raise
            props = landed
        return _written(record, props)

    def delete(self, key: str, etag: str) -> None:
        self._watch().remember(blob_name(self.namespace, key), None)
        blob, retried = self._blob(key), _Retried()
        try:
            with _translated("delete run-once record"):
                blob.delete_blob(
                    etag=etag, match_condition=MatchConditions.IfNotModified, retry_hook=retried
                )
        except RecordConflict:
            # gone after a retry (404, or Azurite's 412): our first copy deleted it
            if not (retried.count and self._gone(blob)):
                raise

    def _gone(self, blob: BlobClient) -> bool:
        with unavailable_as("read run-once record"):
            return not blob.exists()

    def _landed(self, blob: BlobClient, write: str) -> dict[str, Any] | None:
        """The blob's properties when write `write` is the last one there (a copy of it sent
        again by the SDK met its own result), else None."""
        served = ServiceTime(self._container)
        try:
            with unavailable_as("read run-once record"):
                props = blob.get_blob_properties(raw_response_hook=served)
        except HttpResponseError as error:
            if error.status_code == 404:
                return None
            raise
        if (props.metadata or {}).get(WRITE_METADATA) != write:
            return None
        return {"etag": props.etag, "last_modified": props.last_modified, "read_at": served.at}

    # -- reading, in storage's time ----------------------------------------------------------
    def _read(self, blob: BlobClient) -> tuple[Record | None, float | None]:
        """The record in `blob` (None when absent) and storage's time when it answered."""
        served = ServiceTime(self._container)
        try:
            with _translated("read run-once record"):
                download = blob.download_blob(raw_response_hook=served)
                raw = download.readall()
        except RecordConflict:
            return None, served.at
        except HttpResponseError as error:
            if error_code(error) == "ContainerNotFound":
                return None, served.at
            raise
        props = download.properties
        ttl = (props.metadata or {}).get("ttl")
        record = Record.from_json(
            raw,
            props.etag,
            ttl=float(ttl) if ttl else None,
            written_at=_latest(props.last_modified),
            read_at=served.at,
        )
        return record, served.at

    # -- records written before names had a namespace ------------------------------------------
    def _legacy_open(self, now: float) -> bool:
        window = legacy_window()
        if window <= 0:
            return False
        began = self._namespace_began()
        return began is not None and now < began + window

    def _namespace_began(self) -> float | None:
        """When this namespace began, if there were 0.2 records then; None if there were none."""
        cache_key = self._since_key
        with _since_lock:
            if cache_key in _since:
                return _since[cache_key]
        marker = self._container.get_blob_client(f"{self.namespace}/{SINCE_MARKER}")
        with unavailable_as("read namespace marker"):
            try:
                props = marker.get_blob_properties()
                legacy, began = props.metadata.get("legacy"), epoch(props.last_modified)
            except HttpResponseError as error:
                if error.status_code != 404:
                    raise
                found = "present" if self._has_legacy_records() else "none"
                legacy = found
                try:
                    written = retry_on_missing_container(
                        self._container,
                        lambda: marker.upload_blob(
                            b"", overwrite=False, metadata={"legacy": found}
                        ),
                    )
                    began = epoch(written["last_modified"])
                except HttpResponseError as lost_race:
                    if error_code(lost_race) != "BlobAlreadyExists":
                        raise
                    props = marker.get_blob_properties()
                    legacy, began = props.metadata.get("legacy"), epoch(props.last_modified)
        result = began if legacy == "present" else None
        with _since_lock:
            _since[cache_key] = result
        return result

    def _has_legacy_records(self) -> bool:
        """Whether the container's top level holds a blob (0.2 kept records there)."""
        try:
            return any(
                not item.name.endswith("/") for item in self._container.walk_blobs(delimiter="/")
            )
        except HttpResponseError as error:
            if error_code(error) == "ContainerNotFound":
                return False
            raise

    def _adopt(self, legacy: Record) -> Record | None:
        """Copy a 0.2 record into the namespace as it is (it keeps its own `expires_at`)."""
        copy = legacy.with_(ttl=None)
        try:
            adopted = self.put_if_absent(copy)
        except RecordConflict:  # another instance adopted it (or wrote a new one) first
            record, _ = self._read(self._blob(legacy.key))
            return record
        return adopted.with_(written_at=None, read_at=legacy.read_at)


def _metadata(record: Record, body: bytes, write: str) -> dict[str, str]:
    """The write's id, `ttl`, and the record's JSON `body` when small (so a listing carries
    it, `_record_watch`)."""
    if record.ttl is None:
        return {WRITE_METADATA: write}
    return {WRITE_METADATA: write, "ttl": repr(float(record.ttl)), **record_metadata(body)}


def _write_id() -> str:
    return uuid.uuid4().hex


class _Retried:
    """A call's `retry_hook`: `.count` is how often the SDK's retry policy sent it again.
    (No `__bool__`: the SDK calls a hook only if it is truthy.)"""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, **_: Any) -> None:
        self.count += 1


def _latest(moment: Any) -> float | None:
    """The latest instant a whole-second `Last-Modified` can stand for."""
    at = epoch(moment)
    return None if at is None else at + TIME_RESOLUTION


def _written(record: Record, props: Any) -> Record:
    return record.with_(
        etag=str(props["etag"]),
        written_at=_latest(props.get("last_modified")),
        read_at=props["read_at"] if "read_at" in props else epoch(props.get("date")),
    )
