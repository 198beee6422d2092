"""Open an incoming blob as a text stream, one small ranged GET at a time.

The SDK's default first GET fetches up to 32 MiB, so `chunks()` alone would hold a whole
nightly file in memory, and the SDK's peak while reading one range is about 9x the range
(measured: 2.4 MB at 256 KiB, 9.5 MB at 1 MiB, 29 MB at 4 MiB). This client asks for
256 KiB per request (a 7 MB file is 28 GETs), and every range is read with `If-Match` on
the etag seen when listing: a file replaced mid-import fails the read instead of mixing
two versions. A resumed import opens the blob at its checkpoint's byte offset.
"""

from __future__ import annotations

import functools
from typing import Any

from azure.core import MatchConditions
from blobsingleton import StorageAccount

from shared import storage
from shared.imports.text_stream import ChunkedText

CHUNK_BYTES = 256 * 1024


@functools.cache
def _streaming_service(account: StorageAccount) -> Any:
    return account.with_options(
        max_single_get_size=CHUNK_BYTES, max_chunk_get_size=CHUNK_BYTES
    ).blob_service()


def streaming_blob_service(connection: str = "AzureWebJobsStorage") -> Any:
    """A `BlobServiceClient` whose downloads come in `CHUNK_BYTES` pieces."""
    return _streaming_service(storage.account(connection))


def open_text(
    container: str,
    blob_name: str,
    etag: str,
    connection: str = "AzureWebJobsStorage",
    *,
    offset: int = 0,
    size: int | None = None,
) -> ChunkedText:
    """The blob's text from byte `offset` on (a range read: nothing before it is fetched),
    decoded as it streams; the read fails if the blob changed since `etag`."""
    if offset and size is not None and offset >= size:
        return ChunkedText([], start=offset)  # resumed at the end: a range read would be 416
    blob = streaming_blob_service(connection).get_blob_client(container, blob_name)
    download = blob.download_blob(
        offset=offset or None, etag=etag, match_condition=MatchConditions.IfNotModified
    )
    return ChunkedText(download.chunks(), start=offset)
