"""Conditional blob writes that know their own copy when it comes back to them.

The Storage SDK sends a request again when its answer is lost (the connection reset after
the request left, a read timeout). A conditional write (`If-None-Match: *`, `If-Match`) sent
twice meets its own first copy: 409 or 412, which would read as someone else's write. So
`upload_if` gives each write an id in the blob's metadata (`write`) and, only when a
conflict follows one of the SDK's retries (the call's `retry_hook` saw one), reads the blob
back: the write is ours if its id is there. A conflict at the first attempt is someone
else's and costs no extra request.

Used by the import's checkpoint, the jobs' unit markers and the email outbox; the library's
run-once records do the same in `blobsingleton`'s own store.
"""

from __future__ import annotations

import uuid
from typing import Any

from azure.core.exceptions import HttpResponseError

#: Metadata naming the write that put the blob's current content there.
WRITE_METADATA = "write"


class _Retried:
    """A call's `retry_hook`: `.count` is how often the SDK sent the request again (no
    `__bool__`: the SDK calls a hook only if it is truthy)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, **_: Any) -> None:
        self.count += 1


def upload_if(blob: Any, data: bytes, *, metadata: dict[str, str] | None = None,
              **options: Any) -> str | None:  # fmt: skip
    """`blob.upload_blob(data, **options)` with its condition in `options`: the new ETag, or
    None when the condition failed because of another write. Other errors raise."""
    write = uuid.uuid4().hex
    retried = _Retried()
    try:
        answer = blob.upload_blob(
            data, metadata={**(metadata or {}), WRITE_METADATA: write}, retry_hook=retried,
            **options,
        )  # fmt: skip
    except HttpResponseError as error:
        if error.status_code not in (409, 412):
            raise
        return _ours(blob, write) if retried.count else None
    return str(answer["etag"])


def _ours(blob: Any, write: str) -> str | None:
    """The blob's ETag when write `write` is the last one there, else None."""
    try:
        props = blob.get_blob_properties()
    except HttpResponseError as error:
        if error.status_code == 404:
            return None
        raise
    return str(props.etag) if (props.metadata or {}).get(WRITE_METADATA) == write else None
