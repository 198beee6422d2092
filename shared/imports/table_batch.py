"""An entity group transaction ($batch) of REPLACE operations, built and read directly.

The Tables SDK builds a transaction's multipart body, and reads the response, through the
standard library's `email` package: measured here, about 0.6 ms of client CPU per row of a
99-row transaction, which bounds one process to well under 2,000 rows/s whatever the link.
This module writes the same wire format (OData JSON parts in one changeset, as the SDK
sends it: `PUT {table}(PartitionKey='..',RowKey='..')`, `If-Match` where asked) and sends
it through the table client's own pipeline (its authentication, retries and hooks), then
reads only what the writer needs from the answer: every part's status, and the ETags.

Entities go through the SDK's own serializer (`_add_entity_properties`), so types are
annotated exactly as the SDK annotates them.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any
from urllib.parse import quote

from azure.core.exceptions import HttpResponseError
from azure.core.rest import HttpRequest
from azure.data.tables._serialize import _add_entity_properties, _prepare_key

_STATUS = re.compile(rb"^HTTP/1\.1 (\d{3})", re.MULTILINE)
_ETAG = re.compile(rb"^ETag: ?(.+?)\r?$", re.MULTILINE | re.IGNORECASE)
_CODE = re.compile(rb'"code"\s*:\s*"([^"]+)"')


class TransactionFailed(HttpResponseError):
    """A part of the transaction was refused (nothing of it was written)."""

    def __init__(self, status: int, code: str, index: int | None) -> None:
        super().__init__(message=f"transaction refused: {status} {code} (operation {index})")
        self.status_code = status
        self.error_code = code
        self.index = index


def _key(value: str) -> str:
    return quote(_prepare_key(value), safe="")


def submit_replace(
    table: Any, operations: list[tuple[dict[str, Any], str | None]]
) -> list[str | None]:
    """REPLACE each entity (upsert; with `If-Match: etag` where an etag is given), as one
    transaction; returns the ETag of each. Raises `TransactionFailed` if it was refused."""
    base = f"{table.scheme}://{table._primary_hostname}"
    name = table.table_name
    version = table._client._config.version
    changeset = f"changeset_{uuid.uuid4()}"
    batch = f"batch_{uuid.uuid4()}"
    parts: list[bytes] = [
        f"--{batch}\r\nContent-Type: multipart/mixed; boundary={changeset}\r\n\r\n".encode()
    ]
    for index, (entity, etag) in enumerate(operations):
        body = json.dumps(_add_entity_properties(entity)).encode()
        url = (
            f"{base}/{name}(PartitionKey='{_key(str(entity['PartitionKey']))}',"
            f"RowKey='{_key(str(entity['RowKey']))}')"
        )
        head = (
            f"--{changeset}\r\nContent-Type: application/http\r\n"
            f"Content-Transfer-Encoding: binary\r\nContent-ID: {index}\r\n\r\n"
            f"PUT {url} HTTP/1.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nx-ms-version: {version}\r\n"
            f"DataServiceVersion: 3.0\r\nAccept: application/json\r\n"
            + (f"If-Match: {etag}\r\n" if etag else "")
            + "\r\n"
        )
        parts += [head.encode(), body, b"\r\n"]
    parts.append(f"--{changeset}--\r\n\r\n--{batch}--\r\n".encode())
    request = HttpRequest(
        "POST",
        f"{base}/$batch",
        headers={
            "x-ms-version": version,
            "DataServiceVersion": "3.0",
            "MaxDataServiceVersion": "3.0;NetFx",
            "Content-Type": f"multipart/mixed; boundary={batch}",
            "Accept": "application/json",
        },
        content=b"".join(parts),
    )
    response = table._client.send_request(request, stream=True)
    answer = response.read()
    if response.status_code != 202:
        raise TransactionFailed(response.status_code, _code(answer), None)
    statuses = [int(s) for s in _STATUS.findall(answer)]
    failed = next((s for s in statuses if not 200 <= s < 300), None)
    if failed is not None or len(statuses) != len(operations):
        content_id = re.search(rb"Content-ID: ?(\d+)", answer)
        raise TransactionFailed(failed or 500, _code(answer),
                                int(content_id.group(1)) if content_id else None)  # fmt: skip
    etags = [e.decode().strip() for e in _ETAG.findall(answer)]
    return (
        etags
        if len(etags) == len(operations)
        else [*etags, *[None] * len(operations)][: len(operations)]
    )


def _code(answer: bytes) -> str:
    found = _CODE.search(answer)
    return found.group(1).decode() if found else ""
