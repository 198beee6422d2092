"""Account names are checked before they become a lease key, a blob prefix or a PartitionKey."""

from __future__ import annotations

import pytest

from shared.imports.accounts import InvalidAccount, configured_accounts, validate_account
from shared.imports.fanout import accounts_to_import
from shared.imports.layout import imports_container
from shared.imports.request import ImportRequest, InvalidImportRequest
from tests.imports.support import ImportsEnv


@pytest.mark.parametrize("name", ["acme", "ACME-01", "a_b", "9lives", "x" * 63])
def test_valid_account_names(name: str) -> None:
    assert validate_account(name) == name


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("../x", "path"),
        ("a/b", "path"),
        ("a\\b", "path"),
        ("..", "path"),
        ("x" * 64, "64 characters"),
        ("ac\nme", "control"),
        ("ac\x00me", "control"),
        ("", "empty"),
        ("-acme", "letters"),
        ("acme.", "letters"),
        ("a#b", "letters"),
        ("a?b", "letters"),
        ("~state", "letters"),
        (None, "string"),
    ],
)
def test_invalid_account_names_say_why(name: object, reason: str) -> None:
    with pytest.raises(InvalidAccount, match=reason):
        validate_account(name)


def test_import_request_round_trip_and_rejections() -> None:
    request = ImportRequest(account="acme", run_date="2026-11-22", run_id="2026-11-22")
    assert ImportRequest.parse(request.to_json()) == request
    for body in (
        b"not json",
        b"[]",
        b'{"account": "../x", "run_date": "2026-11-22", "run_id": "2026-11-22"}',
        b'{"account": "acme", "run_date": "22/11/2026", "run_id": "2026-11-22"}',
        b'{"account": "acme", "run_date": "2026-11-22", "run_id": "2026-11-21"}',
        b'{"account": "acme", "run_date": "2026-11-22", "run_id": "2026-11-22", "x": 1}',
        b'{"account": "acme", "run_date": "2026-11-22"}',
        b"\xff\xfe",
    ):
        with pytest.raises(InvalidImportRequest):
            ImportRequest.parse(body)


def test_accounts_are_the_valid_folders_of_the_imports_container(imports_env: ImportsEnv) -> None:
    container = imports_container(create=True)
    for name in ("acme/incoming/a.csv", "beta/incoming/b.csv", "bad..name/incoming/c.csv",
                 "ok_1/processed/x.csv", "top-level-file.csv"):  # fmt: skip
        container.upload_blob(name, b"x")
    accounts, skipped = accounts_to_import()
    assert accounts == ["acme", "beta", "ok_1"]
    assert skipped == 1


def test_configured_accounts_win_and_must_be_valid(
    imports_env: ImportsEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IMPORT_ACCOUNTS", "beta, acme,acme")
    assert configured_accounts() == ["acme", "beta"]
    assert accounts_to_import() == (["acme", "beta"], 0)
    monkeypatch.setenv("IMPORT_ACCOUNTS", "acme,../etc")
    with pytest.raises(InvalidAccount):
        configured_accounts()
