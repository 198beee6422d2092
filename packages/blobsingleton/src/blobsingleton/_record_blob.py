"""How a run-once record is kept in a blob, and read back in storage's time (docs/internals.md)."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from blobsingleton._connection import TIME_RESOLUTION, epoch
from blobsingleton._records import Record

#: Metadata key holding the record's JSON (base64), so a listing carries it.
RECORD_METADATA = "record"
#: Records whose JSON is longer are written without it (a listing then costs one read).
MAX_METADATA_RECORD = 4096
#: Metadata key of such a record's JSON without its result (a batch's look-up reads its state
#: from a listing and its result, from the body, only when asked).
SUMMARY_METADATA = "summary"
#: The `result` of a record read from its summary: the result is in the blob's body.
IN_BODY: Any = {"$t": "in_body"}


def metadata(record: Record, body: bytes) -> dict[str, str]:
    values = {} if record.ttl is None else {"ttl": repr(float(record.ttl))}
    if len(body) <= MAX_METADATA_RECORD:
        values[RECORD_METADATA] = base64.b64encode(body).decode("ascii")
        return values
    summary = record.with_(result=None).to_json()
    if len(summary) <= MAX_METADATA_RECORD:
        values[SUMMARY_METADATA] = base64.b64encode(summary).decode("ascii")
    return values


def latest(moment: Any) -> float | None:
    """The latest instant a whole-second `Last-Modified` can stand for."""
    at = epoch(moment)
    return None if at is None else at + TIME_RESOLUTION


def from_body(
    raw: bytes, etag: str | None, meta: dict[str, str] | None, last_modified: Any,
    read_at: float | None,
) -> Record:  # fmt: skip
    """The record a blob holds (`ttl` from its metadata wins over the body's)."""
    ttl = (meta or {}).get("ttl")
    beside: dict[str, Any] = {"written_at": latest(last_modified), "read_at": read_at}
    if ttl:
        beside["ttl"] = float(ttl)
    return Record.from_json(raw, etag, **beside)


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
        record = from_body(
            base64.b64decode(encoded, validate=True), etag, meta, last_modified, read_at
        )
    except (binascii.Error, ValueError, KeyError, TypeError):
        return None
    return record.with_(result=IN_BODY) if in_body else record


def from_download(download: Any, raw: bytes, read_at: float | None) -> Record | None:
    """The record a download read (None when the body is not a record)."""
    props = download.properties
    try:
        return from_body(raw, props.etag, props.metadata, props.last_modified, read_at)
    except (ValueError, KeyError, TypeError):
        return None
