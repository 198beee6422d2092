"""Run-once records as block blobs, written with If-None-Match / If-Match: each operation one
request, as the lock blob's; a record is kept as the blob's body and, when small, its metadata
(`RecordBlob`); `watch` and `get_many` go through the process's watcher of the prefix
(`_record_watch`) (docs/internals.md)."""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from azure.core import MatchConditions
from azure.core.exceptions import (
    DecodeError,
    HttpResponseError,
    IncompleteReadError,
    ServiceResponseError,
)

from blobsingleton import _connection
from blobsingleton._azure_sdk import pipeline_sender
from blobsingleton._connection import TIME_RESOLUTION, ServiceTime, StorageAccount, epoch, http_date
from blobsingleton._keys import blob_name, prefix
from blobsingleton._keys import namespace as resolve_namespace
from blobsingleton._listing import list_page
from blobsingleton._record_watch import RecordWatch, State, watch_for
from blobsingleton._records import IN_BODY, Record, RecordStore
from blobsingleton._storage_errors import Meaning, answered_error, created_if_missing, meaning
from blobsingleton._storage_errors import record_errors as _translated
from blobsingleton.errors import RecordConflict

if TYPE_CHECKING:
    from azure.storage.blob import BlobClient, ContainerClient

log = logging.getLogger("blobsingleton")

#: A read whose body breaks off is sent again up to this many times in all (as the SDK's
#: downloads do: the pipeline's retries end with the answer's headers).
READ_ATTEMPTS = 3
#: Blob clients a record store keeps (by blob name, oldest dropped first).
_KEPT_CLIENTS = 256
#: A look-up of this many keys at most (first looks arriving together) is the watcher's: one
#: request with every key waiting in the process (`RecordWatch.read_many`).
WATCHED_LOOKUP = 16
#: A batch's look-up (`get_many`): pages of LOOKUP_SLACK names per key (LOOKUP_PAGE at most,
#: the service's limit), LOOKUP_PAGES pages at most; keys past them are read one by one.
LOOKUP_SLACK, LOOKUP_PAGE, LOOKUP_PAGES = 8, 5000, 2

#: Metadata key holding the record's JSON (base64), so a listing carries it.
RECORD_METADATA = "record"
#: Records whose JSON is longer are written without it (a listing then costs one read).
MAX_METADATA_RECORD = 4096
#: Metadata key of such a record's JSON without its result (a batch's look-up reads its state
#: from a listing and its result, from the body, only when asked).
SUMMARY_METADATA = "summary"


class BlobRecordStore(RecordStore):
    """Records in `container` (default: app setting RUNONCE_CONTAINER, else "runonce"), in
    `namespace` (default: BLOBSINGLETON_NAMESPACE, else the Functions host id), under `scope`
    (a function's own records) or none (the app's)."""

    def __init__(
        self,
        container: ContainerClient | None = None,
        storage: StorageAccount | None = None,
        *,
        namespace: str | None = None,
        scope: str | None = None,
    ) -> None:
        self._container = _connection.container(container, _connection.RECORD_CONTAINER, storage)
        self.namespace = resolve_namespace(namespace)
        self.prefix = prefix(self.namespace, scope)
        self._requests = RecordRequests(self._container)
        self._watcher: RecordWatch | None = None

    def _name(self, key: str) -> str:
        return blob_name(self.prefix, key)

    @property
    def speed_key(self) -> tuple[str, str]:
        """What the speed layer learns per (every store of one container and prefix shares it)."""
        return (self._container.url, self.prefix)

    def _watch(self) -> RecordWatch:
        if self._watcher is None:
            self._watcher = watch_for(self._container, self.prefix, self)
        return self._watcher

    def notify(self, listener: Callable[[str, Record | None], None]) -> None:
        """Have `listener(key, record)` told, in this process, of each completed record a
        watcher's listing of this prefix carries, and `(key, None)` when a store of this prefix
        deletes a record (the speed layer listens: a store never calls it)."""
        with _listeners_lock:
            heard = _listeners.setdefault(self.speed_key, [])
            if listener not in heard:
                heard.append(listener)

    def _tell(self, key: str, record: Record | None) -> None:
        with _listeners_lock:
            heard = list(_listeners.get(self.speed_key, ()))
        for listener in heard:
            listener(key, record)

    # What the watcher asks (`_record_watch.Watched`).

    def read(self, key: str) -> Record | None:
        return self._read_key(key)

    def seen(self, name: str, record: Record) -> None:
        if self._name(record.key) == name:  # (not another scope's under a common prefix)
            self._tell(record.key, record)

    def listed(self, item: Any, served_at: float | None) -> tuple[str | None, Record | None]:
        etag = quoted_etag(item.etag)  # listings give it bare; headers and writes quoted
        return etag, RecordBlob.from_metadata(item.metadata, etag, item.last_modified, served_at)

    def read_unless(self, name: str, etag: str | None) -> State:
        try:
            answer = self._requests.download(name, unless=etag)
        except HttpResponseError as error:
            if error.status_code == 304:
                return State(True, etag)
            if error.status_code == 404 or meaning(error) is Meaning.NO_CONTAINER:
                return State(False)
            raise
        return State(True, answer.etag, RecordBlob.from_answer(answer))

    def get(self, key: str) -> Record | None:
        """One download (None: no such blob, or no container yet)."""
        return self._read_key(key)

    def put_if_absent(self, record: Record) -> Record:
        """One upload with If-None-Match: * (and, only if the container is missing, its create
        and the upload again)."""
        return self._write(record, "create run-once record")

    def replace(self, record: Record, etag: str) -> Record:
        """One upload with If-Match."""
        return self._write(record, "update run-once record", etag)

    def delete(self, key: str, etag: str) -> None:
        """One delete with If-Match."""
        self._tell(key, None)  # a completion remembered in this process is gone too
        with _translated("delete run-once record"):
            self._requests.delete(self._name(key), etag)

    def watch(self, key: str, etag: str | None, until: float) -> tuple[bool, Record | None]:
        return self._watch().watch(self._name(key), key, etag, until)

    def get_many(self, keys: Sequence[str]) -> dict[str, Record | None]:
        """Up to WATCHED_LOOKUP keys: read at the watcher's next tick, with the keys waiting in
        the process (one request, `RecordWatch.read_many`). More: one List Blobs with metadata
        over the longest common prefix of the keys' blob names (LOOKUP_PAGES pages at most):
        each listed record (one over 4 KB from its summary, its result
        `IN_BODY`), None for a key whose name the listing passed without finding
        it; a key not reached, or listed without either, is left out."""
        names = {self._name(key): key for key in keys}
        if len(names) <= WATCHED_LOOKUP:  # a few: at the watcher's next tick, with its keys
            return self._watch().read_many(names)
        ordered = sorted(names)
        common = os.path.commonprefix(ordered)  # noqa: RUF071 - by character, as List Blobs
        size = min(LOOKUP_PAGE, LOOKUP_SLACK * len(ordered))
        found: dict[str, Record | None] = {}
        listed: set[str] = set()
        covered, marker = "", None
        for _ in range(LOOKUP_PAGES):
            try:
                with _translated("look up run-once records"):
                    page = list_page(self._container, common, size, marker)
            except RecordConflict:  # 404: no container yet, so no records
                covered = "\uffff"
                break
            for item in page.items:
                listed.add(item.name)
                key = names.get(item.name)
                if key is None:
                    continue
                record = RecordBlob.from_metadata(
                    item.metadata, quoted_etag(item.etag), item.last_modified, page.served_at,
                    summary=True,
                )  # fmt: skip
                if record is not None:
                    found[key] = record
            marker = page.next_marker
            covered = "\uffff" if not marker else (page.items[-1].name if page.items else covered)
            if covered >= ordered[-1]:
                break
        for name in ordered:
            if name <= covered and name not in listed:
                found[names[name]] = None
        return found

    def _write(self, record: Record, operation: str, etag: str | None = None) -> Record:
        """Upload `record`: a create (If-None-Match: *, the container made first if missing)
        when `etag` is None, else a replace (If-Match)."""
        body = record.to_json()
        upload = functools.partial(
            self._requests.upload, self._name(record.key), body,
            RecordBlob.metadata(record, body), etag,
        )  # fmt: skip
        with _translated(operation):
            creates = etag is None  # a missing container is made, then the create sent again
            answer = created_if_missing(upload, self._container) if creates else upload()
        return record.with_(
            etag=answer.etag,
            written_at=RecordBlob.latest(answer.last_modified),
            read_at=answer.served_at,
        )

    def _read_key(self, key: str) -> Record | None:
        """The record of `key` (None when absent), timed by storage's answer."""
        try:
            with _translated("read run-once record"):
                answer = self._requests.download(self._name(key))
        except RecordConflict:  # 404: no such blob, or no container yet
            return None
        return RecordBlob.read(answer)


#: Who hears, per container and prefix, of records a store sees on its own (`notify`).
_listeners: dict[tuple[str, str], list[Callable[[str, Record | None], None]]] = {}
_listeners_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class Reply:
    """What storage answered a record blob's request: its etag (quoted), Last-Modified and
    metadata, storage's clock, and, for a read, the body."""

    etag: str | None
    last_modified: datetime | None
    served_at: float | None
    metadata: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


class RecordRequests:
    """A record blob's three requests (upload, download, delete), one request each: sent over
    the container client's own pipeline (its credentials, retries, policies and hooks) and read
    without the SDK's models, with no client built per blob: about a third less client CPU per
    request than the SDK's calls (internals.md). A client that lends no pipeline gets the SDK's
    `BlobClient` calls, one per name kept. Errors come as the SDK raises them
    (`_storage_errors.answered_error`)."""

    def __init__(self, container: ContainerClient) -> None:
        self._container = container
        self._send = pipeline_sender(container)
        url = urlsplit(container.url)
        self._path = f"{url.scheme}://{url.netloc}{url.path.rstrip('/')}/"
        self._query = f"?{url.query}" if url.query else ""  # a SAS token
        self._version = str(getattr(container, "api_version", ""))
        self._clients: dict[str, BlobClient] = {}
        self._clients_lock = threading.Lock()

    def upload(self, name: str, body: bytes, metadata: dict[str, str], etag: str | None) -> Reply:
        """Put Blob: created only if absent (`etag` None), else only over `etag`."""
        if self._send is None:
            conditions: dict[str, Any] = (
                {"overwrite": False} if etag is None
                else {"overwrite": True, "etag": etag,
                      "match_condition": MatchConditions.IfNotModified}
            )  # fmt: skip
            props = self._blob(name).upload_blob(body, metadata=metadata, **conditions)
            return Reply(str(props["etag"]), props.get("last_modified"), epoch(props.get("date")))
        headers = {"x-ms-blob-type": "BlockBlob", "Content-Type": "application/octet-stream"}
        headers.update({f"x-ms-meta-{field}": value for field, value in metadata.items()})
        if etag is None:
            headers["If-None-Match"] = "*"
        else:
            headers["If-Match"] = etag
        return self._answer(self._request("PUT", name, headers, body), "Put Blob")

    def download(self, name: str, unless: str | None = None) -> Reply:
        """Get Blob, whole; `unless` an etag: 304 (an `HttpResponseError`) while it is one."""
        if self._send is None:
            served = ServiceTime(self._container)
            condition: dict[str, Any] = {}
            if unless:
                condition = {"etag": unless, "match_condition": MatchConditions.IfModified}
            download = self._blob(name).download_blob(raw_response_hook=served, **condition)
            body = download.readall()
            props = download.properties
            return Reply(props.etag, props.last_modified, served.at, dict(props.metadata or {}),
                          body)  # fmt: skip
        headers = {"If-None-Match": unless} if unless else {}
        for _ in range(READ_ATTEMPTS - 1):
            with contextlib.suppress(ServiceResponseError, IncompleteReadError, DecodeError):
                return self._answer(self._request("GET", name, headers, stream=True), "Get Blob",
                                    read=True)  # fmt: skip
        # the last attempt: a broken body is transient (`StorageUnavailable` where translated)
        return self._answer(self._request("GET", name, headers, stream=True), "Get Blob", read=True)

    def delete(self, name: str, etag: str) -> None:
        """Delete Blob, only over `etag`."""
        if self._send is None:
            self._blob(name).delete_blob(etag=etag, match_condition=MatchConditions.IfNotModified)
            return
        self._answer(self._request("DELETE", name, {"If-Match": etag}), "Delete Blob")

    def _request(
        self, method: str, name: str, headers: dict[str, str], body: bytes | None = None,
        *, stream: bool = False,
    ) -> Any:  # fmt: skip
        """Send one request; its answer's body is read inside the pipeline's retries, or left
        to read (`stream`: a blob's body, which the pipeline would try to decode)."""
        from azure.core.rest import HttpRequest

        assert self._send is not None  # only called with a pipeline
        headers["x-ms-version"] = self._version
        url = f"{self._path}{quote(name, safe='~/')}{self._query}"
        return self._send(HttpRequest(method, url, headers=headers, content=body), stream=stream)

    @staticmethod
    def _answer(response: Any, request: str, *, read: bool = False) -> Reply:
        body = response.read()  # the whole answer read: the connection goes back to the pool
        if response.status_code >= 300:
            raise answered_error(response, request)
        headers = response.headers
        metadata = {}
        if read:
            metadata = {header[10:].lower(): value for header, value in headers.items()
                        if header.lower().startswith("x-ms-meta-")}  # fmt: skip
        return Reply(
            headers.get("ETag"), http_date(headers.get("Last-Modified")),
            epoch(http_date(headers.get("Date"))), metadata, body if read else b"",
        )  # fmt: skip

    def _blob(self, name: str) -> BlobClient:
        """The blob's SDK client, kept (building one costs about as much client CPU as a
        request)."""
        with self._clients_lock:
            client = self._clients.get(name)
            if client is None:
                if len(self._clients) >= _KEPT_CLIENTS:
                    del self._clients[next(iter(self._clients))]
                client = self._clients[name] = self._container.get_blob_client(name)
            return client


class RecordBlob:
    """How a run-once record is kept in a blob (its JSON in the body, base64 in the metadata so a
    listing carries it) and read back in storage's time."""

    @staticmethod
    def metadata(record: Record, body: bytes) -> dict[str, str]:
        values = {} if record.ttl is None else {"ttl": repr(float(record.ttl))}
        if len(body) <= MAX_METADATA_RECORD:
            values[RECORD_METADATA] = base64.b64encode(body).decode("ascii")
            return values
        summary = record.with_(result=None).to_json()
        if len(summary) <= MAX_METADATA_RECORD:
            values[SUMMARY_METADATA] = base64.b64encode(summary).decode("ascii")
        return values

    @staticmethod
    def latest(moment: Any) -> float | None:
        """The latest instant a whole-second `Last-Modified` can stand for."""
        at = epoch(moment)
        return None if at is None else at + TIME_RESOLUTION

    @staticmethod
    def from_body(
        raw: bytes, etag: str | None, meta: dict[str, str] | None, last_modified: Any,
        read_at: float | None,
    ) -> Record:  # fmt: skip
        """The record a blob holds (`ttl` from its metadata wins over the body's)."""
        ttl = (meta or {}).get("ttl")
        beside: dict[str, Any] = {
            "written_at": RecordBlob.latest(last_modified),
            "read_at": read_at,
        }
        if ttl:
            beside["ttl"] = float(ttl)
        return Record.from_json(raw, etag, **beside)

    @staticmethod
    def from_metadata(
        meta: dict[str, str] | None, etag: str | None, last_modified: Any, read_at: float | None,
        *, summary: bool = False,
    ) -> Record | None:  # fmt: skip
        """The record a listed blob carries in its metadata; None when it carries none. `summary`:
        else the record its summary describes, its `result` `IN_BODY` (never a result to return)."""
        values = meta or {}
        encoded, in_body = values.get(RECORD_METADATA), False
        if not encoded and summary:
            encoded, in_body = values.get(SUMMARY_METADATA), True
        if not encoded:
            return None
        try:
            record = RecordBlob.from_body(
                base64.b64decode(encoded, validate=True), etag, meta, last_modified, read_at
            )
        except (binascii.Error, ValueError, KeyError, TypeError):
            return None
        return record.with_(result=IN_BODY) if in_body else record

    @staticmethod
    def read(answer: Reply) -> Record:
        """The record a download read."""
        return RecordBlob.from_body(
            answer.body, answer.etag, answer.metadata, answer.last_modified, answer.served_at
        )

    @staticmethod
    def from_answer(answer: Reply) -> Record | None:
        """The record a download read (None when the body is not a record)."""
        try:
            return RecordBlob.read(answer)
        except (ValueError, KeyError, TypeError):
            return None


def quoted_etag(etag: str | None) -> str | None:
    """An etag as headers and writes give it (listings give it bare)."""
    return None if etag is None else f'"{etag.strip(chr(34))}"'
