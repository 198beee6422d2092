"""An account's PostgreSQL source on a real server (started on a free port) and a real
Azurite: Entra tokens per connection, bad sources, a timeout mid-run, real processes racing
and a process killed a third of the way through."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator
from datetime import date
from typing import Any

import azure.functions as func
import psycopg
import pytest
from azure.core.credentials import AccessToken
from azure.core.exceptions import ResourceNotFoundError
from sqlalchemy import text

from harness import db_samples
from harness import import_samples as samples
from harness.postgres import PostgresServer, postgres_server
from harness.services import free_port
from shared.imports import db_engine, importer
from shared.imports.checkpoint import CheckpointStore
from shared.imports.db_config import database_source
from shared.imports.history import run_events
from shared.imports.importer import run_import
from shared.imports.request import ImportRequest
from tests.imports.support import ImportsEnv
from tests.imports.test_processes import NIGHT, body, spawn
from tests.support import AppSettings

RUN_DATE = date(2026, 11, 22)
SOURCE = "database:patients"


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with postgres_server() as server:
        yield server


@pytest.fixture(autouse=True)
def _fresh_engines() -> Iterator[None]:
    yield
    db_engine.dispose_all()


_databases = iter(range(1000))


def pg_account(server: PostgresServer, app_settings: AppSettings, accounts: dict[str, int],
               **extra: str) -> dict[str, str]:  # fmt: skip
    """Each account its own database and role, `rows` members in it; the URLs by account."""
    urls: dict[str, str] = {}
    settings: dict[str, str] = {"IMPORT_DATABASE_ACCOUNTS": ",".join(accounts)}
    for account, rows in accounts.items():
        n = next(_databases)
        url = server.create_database(f"db{n}", f"role{n}", f"pw-{n}-Xq7")
        db_samples.create_members_table(url, samples.members(rows, prefix="P"))
        urls[account] = url
        settings.update(db_samples.settings_for(account, url, **extra))
    app_settings.set(settings)
    return urls


class Credential:
    """A TokenCredential (azure-core's protocol) handing out the tokens it is given, in
    order, each valid for its given seconds; counts its calls."""

    def __init__(self, *tokens: tuple[str, float]) -> None:
        self.tokens = list(tokens)
        self.scopes: list[str] = []

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        self.scopes.extend(scopes)
        token, seconds = self.tokens.pop(0)
        return AccessToken(token, int(time.time() + seconds))


def token_shaped(n: int) -> str:
    return "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9." + f"{n:04d}" * 150 + ".sig" + str(n)


def test_entra_tokens_are_fetched_per_connection_and_refreshed_before_expiry(
    postgres: PostgresServer, app_settings: AppSettings
) -> None:
    first, second = token_shaped(1), token_shaped(2)
    postgres.execute(f"CREATE ROLE entra_app LOGIN PASSWORD '{first}'",
                     "CREATE DATABASE entra OWNER entra_app")  # fmt: skip
    url = f"postgresql+psycopg://entra_app@127.0.0.1:{postgres.port}/entra"
    app_settings.set({"IMPORT_DATABASE_ACCOUNTS": "tok",
                      **db_samples.settings_for("tok", url, AUTH="entra")})  # fmt: skip
    source = database_source("tok")
    assert source is not None
    # the first expires within the refresh margin: the next new connection fetches again
    credential = Credential((first, 200), (second, 3600))
    engine = db_engine.engine_for(source, credential=credential)
    tokens = db_engine.tokens_of(engine)
    assert tokens is not None
    with engine.connect() as connection:
        assert connection.execute(text("select current_user")).scalar() == "entra_app"
    assert tokens.fetched == 1
    postgres.execute(f"ALTER ROLE entra_app PASSWORD '{second}'")  # the token rotated
    engine.dispose()
    with engine.connect() as one, engine.connect() as two:  # two new connections
        assert one.execute(text("select 1")).scalar() == two.execute(text("select 1")).scalar()
    assert tokens.fetched == 2  # refreshed once (near expiry), then reused while valid
    assert credential.scopes == [db_engine.POSTGRES_SCOPE] * 2


def test_a_refused_token_or_password_and_an_unreachable_host_fail_their_account_only(
    postgres: PostgresServer, imports_env: ImportsEnv, app_settings: AppSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    caplog.set_level(logging.DEBUG)
    urls = pg_account(postgres, app_settings, {"good": 300, "badpw": 10, "down": 10})
    secret = "Wr0ng-S3cret-pw"
    app_settings.set({
        "IMPORT_DATABASE_BADPW_URL": urls["badpw"].replace(":pw-", f":{secret}-"),
        "IMPORT_DATABASE_DOWN_URL": urls["down"].replace(str(postgres.port), str(free_port())),
        "IMPORT_DATABASE_DOWN_TIMEOUT_S": "5",
    })  # fmt: skip
    passwords = [secret, *(u.split(":")[2].split("@")[0] for u in urls.values())]
    from functions.imports import import_account

    for account in ("badpw", "down", "good"):  # through the queue function, as delivered
        request = ImportRequest.nightly(account, RUN_DATE)
        import_account(func.QueueMessage(id=account, body=request.to_json().encode()))
    reports = {a: imports_env.read_json(f"{a}/reports/{NIGHT}/report.json")
               for a in ("good", "badpw", "down")}  # fmt: skip
    assert reports["good"]["status"] == "completed"
    assert reports["good"]["totals"]["imported"] == 300
    for account, says in (("badpw", "password authentication failed for user"),
                          ("down", "OperationalError: connection")):  # fmt: skip
        report = reports[account]
        assert report["status"] == "failed"
        assert report["files"][0]["status"] == "failed"
        assert says in report["errors"][0], report["errors"]
        assert imports_env.members(account) == {}
    # no retry storm: the runs completed as failed, nothing re-enqueued
    assert imports_env.messages(imports_env.queue) == []
    emails = imports_env.messages(imports_env.notifications_queue)
    assert len(emails) == 3
    seen = caplog.text + repr(reports) + repr(emails)
    assert not [p for p in passwords if p in seen], "a password in a log, report or email"


def test_a_statement_timeout_mid_run_resumes_from_the_last_page(
    postgres: PostgresServer, imports_env: ImportsEnv, app_settings: AppSettings,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    caplog.set_level(logging.INFO)
    urls = pg_account(postgres, app_settings, {"slow": 1000}, PAGE_ROWS="200", TIMEOUT_S="1")
    monkeypatch.setattr(importer, "DATABASE_RETRY_PAUSES_S", (2.5,))
    dsn = urls["slow"].replace("postgresql+psycopg", "postgresql")
    started = threading.Event()

    def lock_table() -> None:
        """Another session takes the table: granted once page 2's read ends, it holds it past
        the 1 s statement timeout of page 3's read, which waits behind it."""
        with psycopg.connect(dsn) as connection:
            connection.execute("LOCK TABLE patients IN ACCESS EXCLUSIVE MODE")
            time.sleep(2)

    def lock_waiting() -> bool:
        with psycopg.connect(dsn) as connection:
            row = connection.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                "WHERE c.relname = 'patients' AND l.mode = 'AccessExclusiveLock'"
            ).fetchone()
            return bool(row and row[0])

    real_save = CheckpointStore.save

    def save(self: CheckpointStore, state: dict[str, Any]) -> None:
        real_save(self, state)
        if (state.get("resume") or {}).get("line") == 400 and not started.is_set():
            started.set()
            threading.Thread(target=lock_table, daemon=True).start()
            deadline = time.monotonic() + 10
            while not lock_waiting():  # queued behind page 2's read, before page 3's
                assert time.monotonic() < deadline, "the lock was never requested"
                time.sleep(0.02)

    monkeypatch.setattr(CheckpointStore, "save", save)
    report = run_import(ImportRequest.nightly("slow", RUN_DATE), 1, email=False)

    source = report.files[-1]
    assert (source.status, source.records, source.added) == ("processed", 1000, 1000)
    # the reader runs ahead of the checkpoint by the prefetch window: page 3 or 4 waited
    assert re.search(r"read broke off after \d+ row\(s\) \(QueryCanceled: canceling statement "
                     r"due to statement timeout\); reading again from the last checkpoint",
                     caplog.text)  # fmt: skip
    assert "resuming run 2026-11-22 of account slow at record 401 / key {'int': 400}" in caplog.text
    assert len(imports_env.members("slow")) == 1000


def test_racing_processes_import_a_postgres_account_once(
    postgres: PostgresServer, imports_env: ImportsEnv, app_settings: AppSettings,
    subprocess_env: dict[str, str],
) -> None:  # fmt: skip
    pg_account(postgres, app_settings, {"race": 3000}, PAGE_ROWS="500")
    env = {**subprocess_env, **{k: v for k, v in _settings(app_settings).items()}}
    procs = [spawn(env, "function", "race", body("race")) for _ in range(4)]
    for proc in procs:
        out = proc.communicate(timeout=180)[0]
        assert proc.returncode == 0, out
    attempts = imports_env.blob_names(f"race/reports/{NIGHT}/attempts/")
    assert len(attempts) == 1, f"the account ran {len(attempts)} times"
    assert len(imports_env.members("race")) == 3000
    report = imports_env.read_json(f"race/reports/{NIGHT}/report.json")
    assert report["totals"]["imported"] == 3000 and report["files"][0]["kind"] == "database"
    events = [e for e in run_events("race", NIGHT) if e.source == SOURCE]
    assert len(events) == 3000


@pytest.mark.slow
def test_a_process_killed_a_third_of_the_way_resumes_and_stores_each_member_once(
    postgres: PostgresServer, imports_env: ImportsEnv, app_settings: AppSettings,
    subprocess_env: dict[str, str],
) -> None:  # fmt: skip
    total = 6000
    pg_account(postgres, app_settings, {"kill": total}, PAGE_ROWS="250")
    env = {**subprocess_env, **_settings(app_settings)}
    crashed = spawn(env, "function", "kill", body("kill"))
    checkpoint = f"kill/reports/{NIGHT}/checkpoint.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            resume = imports_env.read_json(checkpoint).get("resume") or {}
        except ResourceNotFoundError:  # no container or no checkpoint yet
            resume = {}
        if int(resume.get("line", 0)) >= total // 3:
            break
        time.sleep(0.05)
    crashed.kill()  # no cleanup: lease, run-once record, pages past the checkpoint
    crashed.wait()
    stored = int(imports_env.read_json(checkpoint)["resume"]["line"])
    assert total // 3 <= stored < total
    outputs = []
    retry = spawn(env, "function", "kill", body("kill"))
    while True:
        outputs.append(retry.communicate(timeout=180)[0])
        if imports_env.blob_names(f"kill/reports/{NIGHT}/report"):
            report = imports_env.read_json(f"kill/reports/{NIGHT}/report.json")
            if report["status"] == "completed":
                break
        time.sleep(1)  # deferred while the killed process's lease runs out: again
        retry = spawn(env, "function", "kill", body("kill"))
    assert f"resuming run {NIGHT} of account kill at record {stored + 1}" in "".join(outputs)
    assert report["files"][0]["records"] == total
    assert len(imports_env.members("kill")) == total
    events = [e for e in run_events("kill", NIGHT) if e.source == SOURCE]
    assert len(events) == total and len({e.member_id for e in events}) == total


def _settings(app_settings: AppSettings) -> dict[str, str]:
    """The database settings this test set, for child processes."""
    import os

    return {k: v for k, v in os.environ.items() if k.startswith("IMPORT_DATABASE_")}
