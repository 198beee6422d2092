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
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path
from typing import Any

import requests
from azure.core.pipeline.transport import RequestsTransport, RequestsTransportResponse
from azure.core.rest import HttpRequest as RestHttpRequest
from azure.core.rest._requests_basic import RestRequestsTransportResponse
from blobsingleton.config import from_settings
from blobsingleton.testing import MemoryLease, MemoryLocks, RequestCounter
from requests.structures import CaseInsensitiveDict

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


#: The service's answers, by the name a test arms them with: (status, code, message, lands).
ANSWERS = {
    "server_busy": (503, "ServerBusy", "The server is currently unable to receive requests. "
                    "Please retry your request.", False),
    "operation_timed_out": (500, "OperationTimedOut", "The operation could not be completed "
                            "within the permitted time. The operation may or may not have "
                            "succeeded on the server side.", True),
    "internal_error": (500, "InternalError", "The server encountered an internal error. "
                       "Please retry the request.", True),
}  # fmt: skip
LOST = ("operation_timed_out", "internal_error")
Matcher = Callable[[Any], bool]


def azure_error(request: Any, kind: str) -> Any:
    """`kind`'s answer to `request` as Azure Storage writes it, in the response type the real
    transport gives that request (`azure.core.rest`'s for a request built with it)."""
    status, code, message, _ = ANSWERS[kind]
    request_id = str(uuid.uuid4())
    text = f"{message}\nRequestId:{request_id}\nTime:{time.strftime('%Y-%m-%dT%H:%M:%S')}Z"
    body = (
        f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code>'
        f"<Message>{text}</Message></Error>"
    ).encode()
    answer = requests.Response()
    answer.status_code, answer.reason, answer.url = status, message, request.url
    answer.headers = CaseInsensitiveDict({
        "Content-Type": "application/xml", "Content-Length": str(len(body)),
        "x-ms-error-code": code, "x-ms-request-id": request_id,
        "Date": formatdate(usegmt=True),
    })  # fmt: skip
    answer._content = b"" if request.method == "HEAD" else body
    answer._content_consumed = True
    if isinstance(request, RestHttpRequest):
        return RestRequestsTransportResponse(request=request, internal_response=answer)
    return RequestsTransportResponse(request, answer)


class AzureUnderLoad(RequestsTransport):
    """The real transport; the requests `arm`ed for get Azure's answers under load (a 500
    `delay` s after the request landed, if asked); `backoffs` are the retry policy's waits,
    recorded, not slept."""

    def __init__(self) -> None:
        super().__init__()
        self._script: list[tuple[Matcher, str, float]] = []
        self._lock = threading.Lock()
        self.backoffs: list[float] = []
        self.answered: Counter[str] = Counter()

    def arm(self, kind: str, when: Matcher, times: int = 1, delay: float = 0.0) -> None:
        with self._lock:
            self._script.extend([(when, kind, delay)] * times)

    def armed(self) -> int:
        with self._lock:
            return len(self._script)

    def sleep(self, duration: float) -> None:
        self.backoffs.append(duration)

    def send(self, request: Any, **kwargs: Any) -> Any:
        with self._lock:
            found = next((i for i, (when, _, _) in enumerate(self._script) if when(request)), None)
            fate = self._script.pop(found) if found is not None else None
        if fate is None:
            return super().send(request, **kwargs)
        _, kind, delay = fate
        if ANSWERS[kind][3]:  # it lands; its real answer is dropped
            super().send(request, **kwargs).internal_response.close()
        time.sleep(delay)
        self.answered[kind] += 1
        return azure_error(request, kind)


def record_write(key: str) -> Matcher:
    """A write (PUT, DELETE) of the run-once record of `key`."""
    return lambda r: r.method in ("PUT", "DELETE") and r.url.split("?")[0].endswith(f"/{key}")


def lease_action(action: str) -> Matcher:
    """A Lease Blob request doing `action` (acquire, renew, release, change)."""
    return lambda r: "comp=lease" in r.url and r.headers.get("x-ms-lease-action") == action


def fence(request: Any) -> bool:
    """The fencing token's increment (Set Blob Properties, sequence number)."""
    return "comp=properties" in request.url and "x-ms-sequence-number-action" in request.headers
