"""What the library's own tests share: Azurite on free ports, the storage clients, and a
counter of every storage request the library sends.

Azurite is the npm package's binary: `AZURITE` (a path), else `node_modules/.bin/azurite` in
the library's folder or any folder above it, else `azurite` on PATH.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.core.pipeline.transport import RequestsTransport
from blobsingleton.config import from_settings
from blobsingleton.testing import MemoryLease, MemoryLocks, RequestCounter

HERE = Path(__file__).resolve().parent
#: Azurite's well-known development account (public, the same on every machine).
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


request_counter = RequestCounter()


@dataclass(frozen=True)
class Azurite:
    blob_port: int
    queue_port: int
    table_port: int

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
            f"BlobEndpoint=http://127.0.0.1:{self.blob_port}/{ACCOUNT};"
            f"QueueEndpoint=http://127.0.0.1:{self.queue_port}/{ACCOUNT};"
            f"TableEndpoint=http://127.0.0.1:{self.table_port}/{ACCOUNT};"
        )


def azurite_binary() -> str | None:
    if os.environ.get("AZURITE"):
        return os.environ["AZURITE"]
    for folder in (HERE, *HERE.parents):
        candidate = folder / "node_modules" / ".bin" / "azurite"
        if candidate.exists():
            return str(candidate)
    return shutil.which("azurite")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def azurite(binary: str) -> Iterator[Azurite]:
    """Azurite on free loopback ports, its data in a temporary folder, until the block ends."""
    location = tempfile.mkdtemp(prefix="azurite-lib-")
    ports = Azurite(_free_port(), _free_port(), _free_port())
    args = [
        binary, "--skipApiVersionCheck", "--disableTelemetry", "--loose", "--silent",
        "--location", location,
        "--blobHost", "127.0.0.1", "--blobPort", str(ports.blob_port),
        "--queueHost", "127.0.0.1", "--queuePort", str(ports.queue_port),
        "--tableHost", "127.0.0.1", "--tablePort", str(ports.table_port),
    ]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        for port in (ports.blob_port, ports.queue_port, ports.table_port):
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"azurite exited with {proc.returncode}")
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"azurite is not listening on {port}")
                time.sleep(0.1)
        yield ports
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(location, ignore_errors=True)


def blob_service() -> Any:
    """The `BlobServiceClient` of app setting AzureWebJobsStorage."""
    return from_settings("AzureWebJobsStorage").blob_service()


def queue_client(name: str) -> Any:
    """A `QueueClient` for queue `name` of AzureWebJobsStorage, with base64 messages, like
    the host's queue trigger."""
    from azure.storage.queue import BinaryBase64DecodePolicy, BinaryBase64EncodePolicy

    return (
        from_settings("AzureWebJobsStorage")
        .queue_service()
        .get_queue_client(
            name,
            message_encode_policy=BinaryBase64EncodePolicy(),
            message_decode_policy=BinaryBase64DecodePolicy(),
        )
    )


class SteppedLease(MemoryLease):
    """A `MemoryLease` whose renewals the test drives (`renew_now()`), with no thread."""

    def __init__(self, key: str, locks: MemoryLocks, period: float = 15.0, **options: Any):
        super().__init__(key, locks, period, drive_renewal=True, **options)


class StorageFaults(RequestsTransport):
    """A transport over the real one to Azurite that answers chosen requests as Azure does
    under load, or loses their answers:

    "503"    not sent; answered `503 ServerBusy` (the request was not carried out)
    "500"    sent, it lands; its answer replaced by `500 OperationTimedOut` (the operation
             "may or may not have completed")
    "reset"  sent, it lands; the connection breaks before the answer is read
    "rival"  `before()` runs (another writer gets in), then the request fails unsent

    `arm(fault, times, where)` faults the next `times` requests `where(request)` selects (by
    default a write of a blob: PUT or DELETE, not of a container).
    """

    def __init__(self) -> None:
        super().__init__()
        self.fault, self.left = "", 0
        self.where: Any = _writes_a_blob
        self.before: Any = None
        self.methods: Counter[str] = Counter()

    def arm(self, fault: str, times: int = 1, where: Any = None, before: Any = None) -> None:
        self.fault, self.left = fault, times
        self.where, self.before = where or _writes_a_blob, before

    def send(self, request: Any, **kwargs: Any) -> Any:
        self.methods[request.method] += 1
        if not (self.left and self.where(request)):
            return super().send(request, **kwargs)
        self.left -= 1
        if self.fault == "503":
            return _azure_error(request, 503, "ServerBusy", "The server is busy.")
        if self.fault == "rival":
            if self.before is not None:
                self.before()
            raise ServiceRequestError("connection refused (injected)")
        answer = super().send(request, **kwargs)
        answer.internal_response.close()
        if self.fault == "reset":
            raise ServiceResponseError("connection reset by peer (injected)")
        return _azure_error(
            request, 500, "OperationTimedOut",
            "Operation could not be completed within the specified time.",
        )  # fmt: skip


def _writes_a_blob(request: Any) -> bool:
    return request.method in ("PUT", "DELETE") and "restype=container" not in request.url


def _azure_error(request: Any, status: int, code: str, message: str) -> Any:
    """An answer as Azure Storage gives it: the error code header and the XML error body."""
    import email.utils
    import uuid

    import requests
    from azure.core.pipeline.transport._requests_basic import RequestsTransportResponse

    body = (
        f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code>'
        f"<Message>{message}\nRequestId:{uuid.uuid4()}</Message></Error>"
    ).encode()
    response = requests.Response()
    response.status_code, response._content, response.url = status, body, request.url
    response.reason = "Server Busy" if status == 503 else "Operation Timed Out"
    response.headers.update({
        "x-ms-error-code": code, "x-ms-request-id": str(uuid.uuid4()),
        "Content-Type": "application/xml", "Content-Length": str(len(body)),
        "Date": email.utils.formatdate(usegmt=True),
    })  # fmt: skip
    return RequestsTransportResponse(request, response)
