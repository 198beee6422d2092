"""Move a source file out of `incoming/`, and only the version that was imported.

A blob "move" is a server-side copy then a delete. The copy requires the source's etag
(the version that was read) and the delete requires it again, so a file replaced during
the import is neither copied nor deleted: the new version stays in `incoming/` for the next
run, and the run report says so.
"""

from __future__ import annotations

import json
import time
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

COPY_TIMEOUT = 300.0


class SourceChanged(RuntimeError):
    """The source blob is no longer the version that was imported."""


def _condition_failed(error: HttpResponseError) -> bool:
    raw = getattr(error, "error_code", None)
    code = str(getattr(raw, "value", raw) or "")
    return error.status_code == 412 or code in ("ConditionNotMet", "SourceConditionNotMet")


def copy_blob(container: Any, source: str, destination: str, etag: str) -> None:
    """Server-side copy of `source` (if still at `etag`) to `destination`; waits for it."""
    source_blob = container.get_blob_client(source)
    target = container.get_blob_client(destination)
    try:
        target.start_copy_from_url(
            source_blob.url, source_etag=etag, source_match_condition=MatchConditions.IfNotModified
        )
    except HttpResponseError as error:
        if _condition_failed(error):
            raise SourceChanged(source) from None
        raise
    deadline = time.monotonic() + COPY_TIMEOUT
    while True:
        copy = target.get_blob_properties().copy
        if copy.status == "success":
            return
        if copy.status in ("failed", "aborted"):
            raise RuntimeError(f"copy of {source} to {destination} {copy.status}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"copy of {source} to {destination} still {copy.status}")
        time.sleep(0.5)


def delete_source(container: Any, source: str, etag: str) -> None:
    """Delete `source` if it is still the version at `etag`; `SourceChanged` otherwise."""
    try:
        container.get_blob_client(source).delete_blob(
            etag=etag, match_condition=MatchConditions.IfNotModified
        )
    except ResourceNotFoundError:
        return  # already moved by an earlier attempt of this run
    except HttpResponseError as error:
        if _condition_failed(error):
            raise SourceChanged(source) from None
        raise


def move_blob(container: Any, source: str, destination: str, etag: str) -> None:
    """Copy then delete: the file is never gone from both places."""
    copy_blob(container, source, destination, etag)
    delete_source(container, source, etag)


def write_json(container: Any, name: str, data: Any) -> None:
    container.get_blob_client(name).upload_blob(
        json.dumps(data, indent=2, default=str).encode("utf-8"), overwrite=True
    )
