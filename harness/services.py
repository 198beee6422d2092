"""Start the local services the project uses: Azurite (storage) and Prism (SendGrid mock).

Both come from the pinned npm packages in node_modules/ and listen on free loopback ports,
so tests, the demo and benchmarks each get their own instance and never touch port 10000.
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

ROOT = Path(__file__).resolve().parent.parent
NODE_BIN = ROOT / "node_modules" / ".bin"
#: SendGrid's published Mail Send contract, kept in the repository with its source and licence.
SENDGRID_SPEC = ROOT / "harness" / "contracts" / "sendgrid" / "tsg_mail_v3.json"


#: Azurite's well-known development account (public, the same on every machine).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def azurite_connection_string(host: str, blob: int, queue: int, table: int) -> str:
    """The connection string of an Azurite instance listening on the given ports."""
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint=http://{host}:{blob}/{AZURITE_ACCOUNT};"
        f"QueueEndpoint=http://{host}:{queue}/{AZURITE_ACCOUNT};"
        f"TableEndpoint=http://{host}:{table}/{AZURITE_ACCOUNT};"
    )


class ServiceError(RuntimeError):
    """A local service could not be started."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServiceError(f"exited with {proc.returncode}: {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.1)
    tail = log.read_text()[-2000:]
    raise ServiceError(f"port {port} not listening after {timeout:.0f} s: {tail}")


def _binary(name: str) -> str:
    path = NODE_BIN / name
    if not path.exists():
        raise ServiceError(f"{path} is missing: run `make setup` (npm ci) first")
    return str(path)


def stop_process(proc: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """Terminate `proc` and wait for it; killed if it is still running after `grace` s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass(frozen=True)
class Azurite:
    """A running Azurite: its ports and connection string."""

    blob_port: int
    queue_port: int
    table_port: int
    #: Serving HTTPS with this certificate (PEM), and requiring bearer tokens (`--oauth basic`).
    certificate: Path | None = None

    def service_url(self, service: str) -> str:
        """The account URL of "blob", "queue" or "table", as identity-based settings give it."""
        scheme = "https" if self.certificate else "http"
        port = {"blob": self.blob_port, "queue": self.queue_port, "table": self.table_port}
        return f"{scheme}://127.0.0.1:{port[service]}/{AZURITE_ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return azurite_connection_string(
            "127.0.0.1", self.blob_port, self.queue_port, self.table_port
        )


@contextlib.contextmanager
def azurite(
    data_dir: str | None = None,
    *,
    oauth_tls: tuple[Path, Path] | None = None,
    ports: tuple[int, int, int] | None = None,
    in_memory: bool = False,
    keep_alive_s: int | None = None,
) -> Iterator[Azurite]:
    """Run Azurite on free ports until the block ends; its data lives in a temporary folder.

    `in_memory`: keep the data in memory only (`--inMemoryPersistence`): Azurite's disk
    store rewrites its whole table database every few seconds, which stalls it for longer
    and longer as a table grows (a million-row import would spend most of its time there).

    `oauth_tls=(certificate, key)`: serve HTTPS and accept only bearer tokens (`--oauth
    basic`: issuer, audience and lifetime are checked, not the signature), as an account with
    shared-key access disabled would. `keep_alive_s`: how long an idle client connection is
    kept open (Azurite's default is 5 s, against minutes in front of a real account: a
    client reusing a connection the emulator is closing at that moment gets a reset, which
    a POST such as a $batch does not retry). `ports=(blob, queue, table)` and `data_dir` bring a
    stopped Azurite back where its clients expect it, with its data (the chaos run's restart).
    """
    own_dir = data_dir is None
    location = data_dir or tempfile.mkdtemp(prefix="azurite-")
    certificate = oauth_tls[0] if oauth_tls else None
    blob, queue, table = ports or (free_port(), free_port(), free_port())
    ports_used = Azurite(blob, queue, table, certificate)
    log = Path(location) / "azurite.log"
    args = [
        _binary("azurite"),
        "--skipApiVersionCheck",
        "--disableTelemetry",  # else shutdown waits ~10 s for a telemetry flush that never lands
        "--loose",
        "--silent",
        *(["--inMemoryPersistence"] if in_memory else ["--location", location]),
        "--blobHost", "127.0.0.1", "--blobPort", str(ports_used.blob_port),
        "--queueHost", "127.0.0.1", "--queuePort", str(ports_used.queue_port),
        "--tableHost", "127.0.0.1", "--tablePort", str(ports_used.table_port),
    ]  # fmt: skip
    if keep_alive_s is not None:
        for service in ("blob", "queue", "table"):
            args += [f"--{service}KeepAliveTimeout", str(keep_alive_s)]
    if oauth_tls:
        args += ["--oauth", "basic", "--cert", str(oauth_tls[0]), "--key", str(oauth_tls[1])]
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=location)
    try:
        for port in (ports_used.blob_port, ports_used.queue_port, ports_used.table_port):
            _wait_for_port(port, proc, log, timeout=60)
        yield ports_used
    finally:
        stop_process(proc)
        if own_dir:
            shutil.rmtree(location, ignore_errors=True)


@contextlib.contextmanager
def prism(spec: Path = SENDGRID_SPEC) -> Iterator[str]:
    """Serve the SendGrid OpenAPI spec with Prism as a validating mock; yields its base URL."""
    if not spec.exists():
        raise ServiceError(f"SendGrid spec not found at {spec}")
    port = free_port()
    log_dir = tempfile.mkdtemp(prefix="prism-")
    log = Path(log_dir) / "prism.log"
    args = [_binary("prism"), "mock", "--host", "127.0.0.1", "-p", str(port), str(spec)]
    env = dict(os.environ, NO_COLOR="1")
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        _wait_for_port(port, proc, log, timeout=90)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc)
        shutil.rmtree(log_dir, ignore_errors=True)
