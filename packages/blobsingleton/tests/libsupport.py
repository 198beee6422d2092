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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
