"""The error answers Azure Storage gives under load, as the service writes them.

Azure documents three answers every client meets at scale (Storage REST API, "Common REST
API error codes"):

- `503 ServerBusy`: the request was not carried out; retry with back-off.
- `500 OperationTimedOut`: the operation may or may not have completed on the server side.
- `500 InternalError`: the server failed; whether the operation completed is as unknown.

`error_response` writes one as the service does, for the fault proxy to send in place of (or
instead of forwarding) a request: the status line with the message as its reason phrase,
`x-ms-error-code`, `x-ms-request-id`, `x-ms-version` and `x-ms-client-request-id` echoed from
the request, `Date`, `Server`; the body the XML `<Error>` of the Blob and Queue services, or
for Table requests asking for JSON the Tables service's `{"odata.error": ...}`. The message
ends with the request id and the time, as the service's do. An answer to HEAD has no body,
so the SDK reads the code from the header, as it does with the service.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime
from xml.sax.saxutils import escape

from harness.http_messages import Message


@dataclass(frozen=True)
class ServerError:
    """One kind of error answer: its status, code and message, and whether the proxy lets
    the request reach storage first (the operation may have completed)."""

    status: int
    code: str
    message: str
    forwarded: bool


#: The kinds the fault proxy draws per request, by the name a run's rates give them.
SERVER_ERRORS: dict[str, ServerError] = {
    "server_busy": ServerError(
        503,
        "ServerBusy",
        "The server is currently unable to receive requests. Please retry your request.",
        forwarded=False,
    ),
    "operation_timed_out": ServerError(
        500,
        "OperationTimedOut",
        "The operation could not be completed within the permitted time. The operation may or"
        " may not have succeeded on the server side. Please query the server state before"
        " retrying the operation.",
        forwarded=True,
    ),
    "internal_error": ServerError(
        500,
        "InternalError",
        "The server encountered an internal error. Please retry the request.",
        forwarded=True,
    ),
}

SERVERS = {
    "blob": "Windows-Azure-Blob/1.0 Microsoft-HTTPAPI/2.0",
    "queue": "Windows-Azure-Queue/1.0 Microsoft-HTTPAPI/2.0",
    "table": "Windows-Azure-Table/1.0 Microsoft-HTTPAPI/2.0",
}
_ODATA_LEVELS = ("nometadata", "minimalmetadata", "fullmetadata")


def error_response(
    kind: str,
    service: str,
    request: Message,
    *,
    now: datetime | None = None,
    request_id: str | None = None,
) -> bytes:
    """The whole answer (head and body) the `service` ("blob", "queue", "table") gives
    `request` for the error `kind` (a key of `SERVER_ERRORS`)."""
    error = SERVER_ERRORS[kind]
    if service not in SERVERS:
        raise ValueError(f"unknown storage service {service!r}")
    now = now or datetime.now(UTC)
    request_id = request_id or str(uuid.uuid4())
    text = f"{error.message}\nRequestId:{request_id}\nTime:{now:%Y-%m-%dT%H:%M:%S.%f}0Z"
    content_type, body = _body(error.code, text, service, request.header("Accept") or "")
    headers = [
        ("Content-Length", str(len(body))),
        ("Content-Type", content_type),
        ("Server", SERVERS[service]),
        ("x-ms-request-id", request_id),
        ("x-ms-version", request.header("x-ms-version") or ""),
        ("x-ms-error-code", error.code),
    ]
    client_id = request.header("x-ms-client-request-id")
    if client_id is not None:
        headers.append(("x-ms-client-request-id", client_id))
    headers.append(("Date", format_datetime(now, usegmt=True)))
    head = f"HTTP/1.1 {error.status} {error.message}\r\n" + "".join(
        f"{name}: {value}\r\n" for name, value in headers if value
    )
    return (head + "\r\n").encode("latin-1") + (b"" if request.method == "HEAD" else body)


def _body(code: str, text: str, service: str, accept: str) -> tuple[str, bytes]:
    """(Content-Type, body): JSON for a Table request that accepts it, else the XML error."""
    if service == "table" and "application/json" in accept:
        level = next((lv for lv in _ODATA_LEVELS if f"odata={lv}" in accept), "minimalmetadata")
        error = {"odata.error": {"code": code, "message": {"lang": "en-US", "value": text}}}
        content_type = f"application/json;odata={level};streaming=true;charset=utf-8"
        return content_type, json.dumps(error, separators=(",", ":")).encode("utf-8")
    xml = (
        '<?xml version="1.0" encoding="utf-8"?>'
        f"<Error><Code>{code}</Code><Message>{escape(text)}</Message></Error>"
    )
    return "application/xml", xml.encode("utf-8")
