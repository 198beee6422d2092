"""An account's database source (SQLite, embedded) imported beside its files, on Azurite:
keyset pages, checkpoints, the member rules, the source kind named everywhere."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, event, text

from harness import db_samples
from harness import import_samples as samples
from shared.imports import db_config, db_engine
from shared.imports.checkpoint import CheckpointStore
from shared.imports.db_config import DATABASE, database_source
from shared.imports.history import run_events
from shared.imports.importer import run_import
from shared.imports.request import ImportRequest
from shared.settings import InvalidSetting
from tests.imports.support import ImportsEnv, Killed
from tests.otel import Telemetry
from tests.support import AppSettings

NIGHT = date(2026, 11, 22)
RUN = ImportRequest.nightly("acme", NIGHT)
SOURCE = "database:patients"


@pytest.fixture(autouse=True)
def _fresh_engines() -> Any:
    yield
    db_engine.dispose_all()


def sqlite_account(app_settings: AppSettings, path: Path, account: str = "acme",
                   **extra: str) -> str:  # fmt: skip
    url = f"sqlite:///{path}"
    app_settings.set({"IMPORT_DATABASE_ACCOUNTS": account,
                      **db_samples.settings_for(account, url, **extra)})  # fmt: skip
    return url


def test_a_table_is_imported_beside_a_file_and_named_as_a_database_source(
    imports_env: ImportsEnv, app_settings: AppSettings, tmp_path: Path,
    no_health_data_in: Callable[[list[str]], None],
) -> None:  # fmt: skip
    url = sqlite_account(app_settings, tmp_path / "acme.db", PAGE_ROWS="40")
    rows = list(samples.members(230, prefix="D", bad_every=50))
    db_samples.create_members_table(url, rows, typed=False)
    imports_env.upload("acme", "members.csv", samples.csv_bytes(samples.members(20, prefix="C")))
    statements: list[tuple[str, Any]] = []
    engine = db_engine.engine_for(database_source("acme"))  # type: ignore[arg-type]
    event.listen(engine, "before_cursor_execute", lambda conn, cursor, sql, params, context,
                 many: statements.append((sql, params)))  # fmt: skip

    report = run_import(RUN, token=3)

    members = imports_env.members("acme")
    assert len(members) == 20 + 230 - 4
    assert members["D0000007"]["SourceFile"] == SOURCE
    assert members["D0000007"]["SourceLocation"] == "row 8"
    assert members["D0000007"]["DateOfBirth"] == rows[7].date_of_birth
    saved = imports_env.read_json("acme/reports/2026-11-22/report.json")
    assert saved["status"] == "completed"
    kinds = {f["name"]: (f["kind"], f["status"], f["records"], f["rejected"])
             for f in saved["files"]}  # fmt: skip
    assert kinds == {"members.csv": ("csv", "processed", 20, 0),
                     SOURCE: (DATABASE, "processed", 230, 4)}  # fmt: skip
    assert report.status == "completed"
    # keyset pages: 6 pages of 40 (the last one short), each after the last key, bound;
    # nothing skipped by OFFSET (SQLite's dialect writes "LIMIT ? OFFSET ?" with 0)
    pages = [(sql, params) for sql, params in statements if "FROM patients" in sql]
    assert len(pages) == 6
    assert all("ORDER BY patients.id" in sql and "LIMIT ?" in sql for sql, _ in pages)
    assert [params for _, params in pages] == [(40, 0), *[(k, 40, 0) for k in range(40, 201, 40)]]
    assert "patients.id > ?" in pages[1][0]
    # rejects: key and reason, never the row's values
    rejected = imports_env.rejected_lines(
        "acme/rejected/2026-11-22/database:patients.rejected.jsonl"
    )
    assert [(r["location"], r["member_id"], r["record"]) for r in rejected][:2] == [
        ("row 50", "D0000049", '{"id": 50}'), ("row 100", "D0000099", '{"id": 100}'),
    ]  # fmt: skip
    assert rejected[0]["reason"] == "date_of_birth: is not a date (YYYY-MM-DD)"
    # history rows and the summary email name the kind
    events = list(run_events("acme", "2026-11-22"))
    assert {e.kind for e in events if e.source == SOURCE} == {DATABASE}
    assert {e.kind for e in events if e.source == "members.csv"} == {"csv"}
    email = imports_env.messages(imports_env.notifications_queue)[0]
    assert f"- {SOURCE} (database): processed, 226 added" in email["text"]
    no_health_data_in([r.first_name for r in rows] + [r.date_of_birth for r in rows])


def test_nulls_wrong_types_and_duplicates_are_rejects_with_key_and_reason(
    imports_env: ImportsEnv, app_settings: AppSettings, tmp_path: Path
) -> None:
    url = sqlite_account(app_settings, tmp_path / "acme.db")
    db_samples.create_members_table(url, samples.members(6, prefix="D"))
    secret_name = "Zebediah-Secret"
    with create_engine(url).begin() as connection:  # SQLite keeps what a column is given
        connection.execute(text("UPDATE patients SET given_name = NULL WHERE id = 2"))
        connection.execute(text("UPDATE patients SET birth_date = 19700101 WHERE id = 3"))
        connection.execute(text("UPDATE patients SET cover_from = 3.5 WHERE id = 4"))
        connection.execute(text("INSERT INTO patients SELECT 7, patient_no, :name, family_name, "
                                "birth_date, plan_code, cover_from, cover_to FROM patients "
                                "WHERE id = 1"), {"name": secret_name})  # fmt: skip

    run_import(RUN, token=1, email=False)

    lines = imports_env.rejected_lines("acme/rejected/2026-11-22/database:patients.rejected.jsonl")
    found = {json.loads(r["record"])["id"]: r["reason"] for r in lines}
    assert found == {
        2: "first_name: is empty",
        3: "date_of_birth: a database value of type int, expected a date",
        4: "coverage_start: a database value of type float, expected a date",
        7: "member_id: conflicting duplicate in this file, first at row 1",
    }
    assert secret_name not in json.dumps(lines)
    assert set(imports_env.members("acme")) == {"D0000000", "D0000004", "D0000005"}


def test_a_dropped_column_fails_that_source_before_any_write_naming_it(
    imports_env: ImportsEnv, app_settings: AppSettings, tmp_path: Path, telemetry: Telemetry
) -> None:
    url = sqlite_account(app_settings, tmp_path / "acme.db")
    db_samples.create_members_table(url, samples.members(30, prefix="D"))
    with create_engine(url).begin() as connection:
        connection.execute(text("ALTER TABLE patients RENAME COLUMN plan_code TO plan_id"))
    imports_env.upload("acme", "members.csv", samples.csv_bytes(samples.members(5, prefix="C")))

    report = run_import(RUN, token=1, email=False)

    assert report.status == "failed"
    failed = report.files[-1]
    assert (failed.name, failed.kind, failed.status) == (SOURCE, DATABASE, "failed")
    assert failed.error is not None and "'plan_code'" in failed.error
    assert "IMPORT_DATABASE_ACME_COLUMNS" in failed.error
    assert report.errors == [f"{SOURCE}: {failed.error}"]
    assert sorted(imports_env.members("acme")) == [f"C{i:07d}" for i in range(5)]  # files go on
    assert telemetry.added_by("app.imports.files") == {
        (("kind", "csv"), ("status", "processed")): 1,
        (("kind", "database"), ("status", "failed")): 1,
    }
    assert telemetry.added("app.imports.runs", status="failed") == 1


@pytest.mark.parametrize(("suffix", "value", "named"), [
    ("URL", "not a url", "IMPORT_DATABASE_ACME_URL"),
    ("URL", "nosuchdialect://u:hunter2@h/db", "IMPORT_DATABASE_ACME_URL"),
    ("COLUMNS", "member_id=a,first_name=b", "IMPORT_DATABASE_ACME_COLUMNS"),
    ("COLUMNS", "member_id=a,middle_name=b", "IMPORT_DATABASE_ACME_COLUMNS"),
    ("KEY", "id; DROP TABLE x", "IMPORT_DATABASE_ACME_KEY"),
    ("PAGE_ROWS", "5", "IMPORT_DATABASE_ACME_PAGE_ROWS"),
    ("AUTH", "kerberos", "IMPORT_DATABASE_ACME_AUTH"),
])  # fmt: skip
def test_a_bad_setting_fails_the_start_up_check_naming_it(
    app_settings: AppSettings, tmp_path: Path, suffix: str, value: str, named: str
) -> None:
    sqlite_account(app_settings, tmp_path / "acme.db")
    assert [s.account for s in db_config.check()] == ["acme"]
    app_settings.set({f"IMPORT_DATABASE_ACME_{suffix}": value})
    with pytest.raises(InvalidSetting) as error:
        db_config.check()
    assert named in str(error.value)
    assert "hunter2" not in str(error.value)


def test_a_missing_setting_fails_the_run_of_that_source_before_anything_is_read(
    imports_env: ImportsEnv, app_settings: AppSettings, tmp_path: Path
) -> None:
    sqlite_account(app_settings, tmp_path / "acme.db")
    app_settings.set({"IMPORT_DATABASE_ACME_TABLE": None})
    report = run_import(RUN, token=1, email=False)
    assert report.status == "failed"
    assert report.files[0].error == ("app setting IMPORT_DATABASE_ACME_TABLE is not set "
                                     "(account acme is in IMPORT_DATABASE_ACCOUNTS)")  # fmt: skip
    assert imports_env.members("acme") == {}


def test_an_arrival_run_imports_the_files_only(
    imports_env: ImportsEnv, app_settings: AppSettings, tmp_path: Path
) -> None:
    url = sqlite_account(app_settings, tmp_path / "acme.db")
    db_samples.create_members_table(url, samples.members(5, prefix="D"))
    imports_env.upload("acme", "a.csv", samples.csv_bytes(samples.members(2, prefix="C")))
    report = run_import(ImportRequest.arrival("acme", NIGHT, "ab12cd34"), 1, email=False)
    assert [f.name for f in report.files] == ["a.csv"]


def test_a_run_killed_between_pages_resumes_after_the_last_stored_page(
    imports_env: ImportsEnv, app_settings: AppSettings, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    url = sqlite_account(app_settings, tmp_path / "acme.db", PAGE_ROWS="100")
    db_samples.create_members_table(url, samples.members(1000, prefix="D"))
    real_save = CheckpointStore.save
    saves: list[dict[str, Any]] = []

    def dying(self: CheckpointStore, state: dict[str, Any]) -> None:
        if state.get("resume") and int(state["resume"]["line"]) == 400:
            raise Killed  # page 4's rows committed, its checkpoint not
        real_save(self, state)
        saves.append(dict(state))

    monkeypatch.setattr(CheckpointStore, "save", dying)
    with pytest.raises(Killed):
        run_import(RUN, token=1, email=False)
    assert saves[-1]["resume"] == {"key": {"int": 300}, "line": 300}
    monkeypatch.setattr(CheckpointStore, "save", real_save)
    keys: list[Any] = []
    engine = db_engine.engine_for(database_source("acme"))  # type: ignore[arg-type]
    event.listen(engine, "before_cursor_execute", lambda conn, cursor, sql, params, context,
                 many: keys.append(params[0]) if "FROM patients" in sql else None)  # fmt: skip

    report = run_import(RUN, token=2, email=False)

    assert report.status == "completed"
    source = report.files[-1]
    assert (source.records, source.imported, source.rejected) == (1000, 1000, 0)
    assert source.added == 1000  # page 4's rows, committed before the kill, redone as adds
    assert keys == list(range(300, 1001, 100))  # after the last stored page, page by page
    members = imports_env.members("acme")
    assert len(members) == 1000
    events = [e for e in run_events("acme", "2026-11-22") if e.source == SOURCE]
    assert len(events) == 1000 and len({e.member_id for e in events}) == 1000


def test_the_nightly_fan_out_includes_accounts_with_a_database_source(
    imports_env: ImportsEnv, app_settings: AppSettings, tmp_path: Path
) -> None:
    from shared.imports.fanout import accounts_to_import

    imports_env.upload("files", "a.csv", samples.csv_bytes(samples.members(1)))
    sqlite_account(app_settings, tmp_path / "db.db", account="db-only")
    assert accounts_to_import() == (["db-only", "files"], 0)
    app_settings.set({"IMPORT_ACCOUNTS": "files"})
    assert accounts_to_import() == (["db-only", "files"], 0)
