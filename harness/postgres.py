"""A real PostgreSQL server for tests and benchmarks, on a free port, in a folder of its own.

The binaries are Debian's `postgresql` package (`make postgres`, part of `make setup`:
/usr/lib/postgresql/*/bin). PostgreSQL refuses to run as root: as root (CI), the cluster
folder belongs to the package's `postgres` user and `initdb` and `postgres` run as it
(`setpriv`). Password logins only (scram-sha-256, over TCP on 127.0.0.1), so a refused login
is a real one.

    with postgres_server() as server:
        url = server.url("app", "secret")        # postgresql+psycopg://app:secret@127.0.0.1:port/app
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.services import free_port, stop_process

SUPERUSER = "postgres"
SUPERUSER_PASSWORD = "harness-superuser"  # a throwaway server's; never a real secret


class PostgresMissing(RuntimeError):
    """No PostgreSQL binaries: `make postgres` installs Debian's package."""


def bin_dir() -> Path:
    """The newest /usr/lib/postgresql/*/bin (PG_BINDIR overrides)."""
    forced = os.environ.get("PG_BINDIR")
    if forced:
        return Path(forced)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"),
                   key=lambda p: int(Path(p).parts[-3]))  # fmt: skip
    if not found:
        raise PostgresMissing("PostgreSQL is not installed: `make postgres` (as root: Debian's "
                              "postgresql package)")  # fmt: skip
    return Path(found[-1]).parent


@dataclass
class PostgresServer:
    port: int
    folder: Path
    process: subprocess.Popen[bytes]

    def url(self, user: str = SUPERUSER, password: str = SUPERUSER_PASSWORD,
            database: str = "postgres") -> str:  # fmt: skip
        return f"postgresql+psycopg://{user}:{password}@127.0.0.1:{self.port}/{database}"

    def execute(self, *statements: str, database: str = "postgres") -> None:
        """Run statements as the superuser, in autocommit (CREATE DATABASE needs it)."""
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user=SUPERUSER,
                             password=SUPERUSER_PASSWORD, dbname=database,
                             autocommit=True) as connection:  # fmt: skip
            for statement in statements:
                connection.execute(statement.encode())

    def create_database(self, name: str, owner: str, password: str) -> str:
        """A role `owner` (login, `password`) owning a new database `name`; its URL."""
        self.execute(f"CREATE ROLE \"{owner}\" LOGIN PASSWORD '{password}'",
                     f'CREATE DATABASE "{name}" OWNER "{owner}"')  # fmt: skip
        return self.url(owner, password, name)


def _as_postgres() -> list[str]:
    """The prefix that runs a command as the `postgres` user when we are root."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresMissing(
            "running as root and there is no `postgres` user to run "
            "PostgreSQL as (Debian's package creates it)"
        ) from None
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"]


@contextlib.contextmanager
def postgres_server(*, timeout: float = 60.0) -> Iterator[PostgresServer]:
    binaries = bin_dir()
    prefix = _as_postgres()
    folder = Path(tempfile.mkdtemp(prefix="pg-harness-"))
    data, sockets, secret = folder / "data", folder / "run", folder / "pw"
    sockets.mkdir()
    secret.write_text(SUPERUSER_PASSWORD + "\n")
    if prefix:
        account = pwd.getpwnam("postgres")
        for path in (folder, sockets, secret):
            os.chown(path, account.pw_uid, account.pw_gid)
    subprocess.run(
        [*prefix, str(binaries / "initdb"), "-D", str(data), "-U", SUPERUSER, "--pwfile",
         str(secret), "--auth=scram-sha-256", "--encoding=UTF8", "--locale=C.UTF-8",
         "--no-sync"],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    port = free_port()
    process = subprocess.Popen(
        [*prefix, str(binaries / "postgres"), "-D", str(data), "-p", str(port),
         "-k", str(sockets), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
         "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
         "-c", "max_connections=100", "-c", "shared_buffers=64MB"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    server = PostgresServer(port, folder, process)
    try:
        deadline = time.monotonic() + timeout
        while True:
            ready = subprocess.run([str(binaries / "pg_isready"), "-h", "127.0.0.1", "-p",
                                    str(port), "-q"], check=False)  # fmt: skip
            if ready.returncode == 0:
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not start on port {port}")
            time.sleep(0.1)
        yield server
    finally:
        stop_process(process, grace=20)
        shutil.rmtree(folder, ignore_errors=True)
