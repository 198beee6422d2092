"""Every storage request the jobs package makes, one method each, against one container.

Errors are told apart by `error_code` (BlobNotFound, BlobAlreadyExists, ConditionNotMet...),
never by exception class. Reads of something missing return None; a missing container is
created by the writes that can come first (a new job) and means "no such job" to the others.

Answers that never came. The SDK sends a request again when its answer is lost (connection
reset, read timeout), so a write that landed meets its own result. A unit's marker is
created with `known_writes.upload_if`, which knows its own copy when the SDK's second one
meets it (409), so the unit is still counted. The counter's increment is not idempotent,
so it is sent with the SDK's retries off: sent again only when it surely did not land (never
sent, or 503 ServerBusy); when the outcome is unknown the counter is read instead, never
incremented twice (a unit it then misses leaves it one short, which the watcher reconciles
from the markers; one counted twice would announce the job before its last unit).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ServiceRequestError,
    ServiceResponseError,
)

from shared import storage
from shared.jobs.config import JobSettings
from shared.jobs.layout import JobLayout, job_id_of, unit_id_of
from shared.jobs.records import Completion, JobRecord, Marker, UnitState
from shared.known_writes import upload_if

log = logging.getLogger("shared.jobs")

BATCH_DELETE_SIZE = 256  # the Blob Batch API's limit per request
#: Sends of a counter increment that surely did not land (never sent, ServerBusy), and the
#: pause before the next (doubling).
INCREMENT_SENDS = 4
INCREMENT_DELAY_S = 0.2
_MISSING = frozenset({"BlobNotFound", "ContainerNotFound", "ResourceNotFound"})


def _code(error: HttpResponseError) -> str:
    code = getattr(error, "error_code", None)  # set by azure-core, not declared on the class
    return str(getattr(code, "value", code) or "")


def _missing(error: HttpResponseError) -> bool:
    return _code(error) in _MISSING or error.status_code == 404


def _conflict(error: HttpResponseError) -> bool:
    return error.status_code in (409, 412) and _code(error) != "ContainerNotFound"


@dataclass(frozen=True)
class CounterState:
    """The counter as the watcher sees it: units counted, units expected, last change."""

    value: int
    total: int
    modified: float


class JobStore:
    """The blobs of every job in the container named by JOBS_CONTAINER."""

    def __init__(self, settings: JobSettings | None = None, container: Any = None) -> None:
        """`container`: the client of the jobs container (default: built from `settings`)."""
        self.settings = settings or JobSettings.from_env()
        if container is None:
            service = storage.blob_service(self.settings.connection)
            container = service.get_container_client(self.settings.container)
        self._container = container

    def _blob(self, name: str) -> Any:
        return self._container.get_blob_client(name)

    def _create_container(self) -> None:
        with contextlib.suppress(ResourceExistsError):
            self._container.create_container()

    def _read(self, name: str) -> tuple[bytes, str] | None:
        try:
            download = self._blob(name).download_blob()
            return download.readall(), download.properties.etag
        except HttpResponseError as error:
            if _missing(error):
                return None
            raise

    def _create(self, name: str, data: bytes, **kwargs: Any) -> str | None:
        """Create blob `name` if absent (If-None-Match: *): its etag, or None if it exists."""
        for _ in range(2):
            try:
                answer = self._blob(name).upload_blob(data, overwrite=False, **kwargs)
                return str(answer["etag"])
            except HttpResponseError as error:
                if _code(error) == "ContainerNotFound":
                    self._create_container()
                    continue
                if _conflict(error):
                    return None
                raise
        raise RuntimeError(f"container {self.settings.container} vanished twice")

    def _replace(self, name: str, data: bytes, etag: str) -> str | None:
        """Overwrite blob `name` if it still has `etag`: the new etag, or None if it changed."""
        try:
            props = self._blob(name).upload_blob(
                data, overwrite=True, etag=etag, match_condition=MatchConditions.IfNotModified
            )
        except HttpResponseError as error:
            if _conflict(error) or _missing(error):
                return None
            raise
        return str(props["etag"])

    def delete(self, name: str, etag: str | None = None) -> None:
        """Delete blob `name` (if it still has `etag`); already gone is fine."""
        kwargs: dict[str, Any] = {}
        if etag:
            kwargs = {"etag": etag, "match_condition": MatchConditions.IfNotModified}
        try:
            self._blob(name).delete_blob(**kwargs)
        except HttpResponseError as error:
            if not _missing(error):
                raise

    # job records ------------------------------------------------------------------------------
    def create_job(self, record: JobRecord) -> tuple[JobRecord, bool]:
        """Write the record if its id is free: (record with etag, True); else (stored, False)."""
        layout = JobLayout(record.job_id)
        etag = self._create(layout.record, record.to_json())
        if etag is not None:
            return record.with_(etag=etag), True
        stored = self.read_job(record.job_id)
        if stored is None:  # deleted between the two requests: archived meanwhile
            return self.create_job(record)
        return stored, False

    def read_job(self, job_id: str) -> JobRecord | None:
        found = self._read(JobLayout(job_id).record)
        return JobRecord.from_json(*found) if found else None

    def replace_job(self, record: JobRecord) -> JobRecord | None:
        etag = self._replace(JobLayout(record.job_id).record, record.to_json(), record.etag or "")
        return record.with_(etag=etag) if etag else None

    def job_ids(self) -> Iterator[str]:
        """Ids of the jobs that have blobs under `jobs/` (live, or being archived)."""
        try:
            for item in self._container.walk_blobs(name_starts_with="jobs/", delimiter="/"):
                job_id = job_id_of(item.name)
                if job_id is not None:
                    yield job_id
        except HttpResponseError as error:
            if not _missing(error):
                raise

    # the counter --------------------------------------------------------------------------------
    def create_counter(self, job_id: str, total: int) -> None:
        """An empty page blob whose sequence number starts at 0; an existing one is kept."""
        blob = self._blob(JobLayout(job_id).counter)
        try:
            blob.create_page_blob(
                0,
                sequence_number=0,
                metadata={"total": str(total)},
                match_condition=MatchConditions.IfMissing,
            )
        except HttpResponseError as error:
            if not _conflict(error):
                raise

    def increment(self, job_id: str) -> int | None:
        """Add one to the counter, atomically on the service: the new value, in one request.
        None when the counter is gone (the job finished and was archived).

        When the answer never came, the counter's value as read afterwards (this unit
        counted in it or not, never twice)."""
        blob = self._blob(JobLayout(job_id).counter)
        for attempt in range(INCREMENT_SENDS):
            try:
                result = blob.set_sequence_number("increment", retry_total=0)
                return int(result["blob_sequence_number"])
            except ServiceResponseError:
                break  # sent, answer lost: it may have landed
            except HttpResponseError as error:
                if _missing(error):
                    return None
                if error.status_code in (500, 504):
                    break  # may have landed
                if error.status_code != 503 or attempt + 1 == INCREMENT_SENDS:
                    raise  # (503 ServerBusy: not applied, sent again)
            except ServiceRequestError:
                if attempt + 1 == INCREMENT_SENDS:
                    raise  # never sent, every time
            time.sleep(INCREMENT_DELAY_S * 2**attempt)
        state = self.counter_state(job_id)
        if state is None:
            return None
        log.warning(
            "job %s: a counter increment's answer was lost; the counter reads %d of %d (a unit "
            "it missed is counted by the watcher from the markers)",
            job_id, state.value, state.total,
        )  # fmt: skip
        return state.value

    def counter_state(self, job_id: str) -> CounterState | None:
        try:
            props = self._blob(JobLayout(job_id).counter).get_blob_properties()
        except HttpResponseError as error:
            if _missing(error):
                return None
            raise
        return CounterState(
            value=int(props.page_blob_sequence_number or 0),
            total=int((props.metadata or {}).get("total", "0")),
            modified=props.last_modified.timestamp(),
        )

    # unit markers -------------------------------------------------------------------------------
    def mark(self, job_id: str, unit_id: str, state: UnitState, reason: str | None = None) -> bool:
        """Create the unit's marker: True if this call created it, False if it existed."""
        at = time.time()
        body = json.dumps({"state": str(state), "at": at, "reason": reason}).encode()
        metadata = {"state": str(state), "at": f"{at:.6f}"}
        name = JobLayout(job_id).marker(unit_id)
        try:
            created = upload_if(self._blob(name), body, overwrite=False, metadata=metadata)
        except HttpResponseError as error:
            if _code(error) == "ContainerNotFound":
                return True  # no container, no job: the caller finds the counter missing
            raise
        return created is not None

    def unmark(self, job_id: str, unit_id: str) -> None:
        self.delete(JobLayout(job_id).marker(unit_id))

    def index_failed(self, job_id: str, unit_id: str, reason: str | None) -> None:
        """List a failed unit under `failed/`, so finalizing lists failures, not every unit."""
        body = json.dumps({"reason": reason}).encode()
        try:
            self._blob(JobLayout(job_id).failed(unit_id)).upload_blob(body, overwrite=True)
        except HttpResponseError as error:
            if _code(error) != "ContainerNotFound":
                raise  # no container, no job: the caller finds the counter missing

    def unindex_failed(self, job_id: str, unit_id: str) -> None:
        self.delete(JobLayout(job_id).failed(unit_id))

    def failed_units(self, job_id: str) -> list[str]:
        prefix = JobLayout(job_id).failed_prefix
        return sorted(unit_id_of(b.name, prefix) for b in self._list(prefix))

    def markers(self, job_id: str) -> list[Marker]:
        """Every unit marker of the job (one request per 5000)."""
        prefix = JobLayout(job_id).units_prefix
        found = []
        for blob in self._list(prefix, include=["metadata"]):
            metadata = blob.metadata or {}
            state = metadata.get("state", UnitState.DONE)
            at = float(metadata.get("at") or blob.last_modified.timestamp())
            found.append(Marker(unit_id_of(blob.name, prefix), UnitState(state), at))
        return found

    def names(self, prefix: str) -> list[str]:
        """Names of the blobs under `prefix` (one request per 5000)."""
        return [blob.name for blob in self._list(prefix)]

    def _list(self, prefix: str, **kwargs: Any) -> Iterator[Any]:
        try:
            yield from self._container.list_blobs(name_starts_with=prefix, **kwargs)
        except HttpResponseError as error:
            if not _missing(error):
                raise

    # payloads too large for a queue message ---------------------------------------------------
    def put_payload(self, job_id: str, unit_id: str, data: bytes) -> str:
        name = JobLayout(job_id).payload(unit_id)
        self._blob(name).upload_blob(data, overwrite=True)
        return name

    def get_payload(self, job_id: str, unit_id: str) -> bytes | None:
        found = self._read(JobLayout(job_id).payload(unit_id))
        return found[0] if found else None

    # completion ----------------------------------------------------------------------------------
    def create_completion(self, completion: Completion) -> tuple[Completion | None, bool]:
        """Create the outcome if none exists (this caller finalizes): (it, True); else the
        stored one, False; (None, False) if it was deleted in between (job archived).

        A create that lands after the job was archived (a finalizer that decided before the
        archive, such as the watcher) is a stray copy, not a new outcome: (it, False), so the
        job's end is logged and counted once; the caller's archive step deletes the copy. The
        archive is written before the live outcome is deleted, so one HEAD after the create
        tells the two apart."""
        name = JobLayout(completion.job_id).completion
        etag = self._create(name, completion.to_json())
        if etag is not None:
            return completion.with_(etag=etag), not self.archive_exists(completion.job_id)
        return self.read_completion(completion.job_id), False

    def read_completion(self, job_id: str) -> Completion | None:
        found = self._read(JobLayout(job_id).completion)
        return Completion.from_json(*found) if found else None

    def replace_completion(self, completion: Completion) -> Completion | None:
        name = JobLayout(completion.job_id).completion
        etag = self._replace(name, completion.to_json(), completion.etag or "")
        return completion.with_(etag=etag) if etag else None

    # archive -----------------------------------------------------------------------------------
    def write_archive(self, job: JobRecord | None, completion: Completion) -> None:
        data = {"job": job.to_dict() if job else None, "completion": completion.to_dict()}
        blob = self._blob(JobLayout(completion.job_id).archive)
        blob.upload_blob(json.dumps(data, separators=(",", ":")).encode(), overwrite=True)

    def read_archive(self, job_id: str) -> dict[str, Any] | None:
        found = self._read(JobLayout(job_id).archive)
        return json.loads(found[0]) if found else None

    def archive_exists(self, job_id: str) -> bool:
        try:
            self._blob(JobLayout(job_id).archive).get_blob_properties()
        except HttpResponseError as error:
            if _missing(error):
                return False
            raise
        return True

    def delete_job_blobs(self, job_id: str, keep: frozenset[str] = frozenset()) -> int:
        """Delete every blob under the job's prefix except `keep`, 256 per batch request."""
        names = [name for name in self.names(JobLayout(job_id).prefix) if name not in keep]
        for start in range(0, len(names), BATCH_DELETE_SIZE):
            self._delete_many(names[start : start + BATCH_DELETE_SIZE])
        return len(names)

    def _delete_many(self, names: list[str]) -> None:
        try:
            self._container.delete_blobs(*names, raise_on_any_failure=False)
        except HttpResponseError as error:  # an account without the batch API
            log.info("batch delete unavailable (%s): deleting one by one", _code(error))
            for name in names:
                self.delete(name)
