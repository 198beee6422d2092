"""Who may use the operator API: a verified identity (App Service principal with an app role,
or an operator key), never a function key, the master key, a key in a URL or a header a
client can forge; and what each may see (no member id anywhere, outcomes to operators)."""

from __future__ import annotations

import json
from typing import Any

import azure.functions as func
import pytest
from blobsingleton.records import Status

from functions import ops as api
from shared import operators, storage
from shared.imports.report import FileReport, RunReport
from tests.ops.support import (
    AS_OPERATOR,
    OpsEnv,
    call,
    hold_lock,
    principal,
    put_record,
    report_container,
    start_job,
)
from tests.support import AppSettings

JSON = {"Content-Type": "application/json"}
READS = [api.ops_locks, api.ops_runs, api.ops_jobs, api.ops_imports, api.ops_summary_last_hour]
CHANGES = [(api.ops_break_lock, "import-acme"), (api.ops_reset_run, "import-acme-2026-11-22")]


@pytest.fixture
def easy_auth(ops_env: OpsEnv, app_settings: AppSettings) -> None:
    """As deployed behind App Service authentication: the deployment and the platform say so."""
    app_settings.set({"OPS_EASY_AUTH": "true", "WEBSITE_AUTH_ENABLED": "True"})


def change(function: Any, key: str, headers: dict[str, str], **params: str) -> tuple[int, Any]:
    return call(function, "POST", params=params, route_params={"key": key},
                body={"reason": "stuck since 02:30"}, headers={**JSON, **headers})  # fmt: skip


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"x-functions-key": "the-master-key"},  # what the host checked before: now nothing
        {"x-ms-client-principal-name": "admin@example.com"},  # a client can send this
        {"X-Operator-Key": "not-a-key-of-ours"},
        principal("mallory", "Ops.Operate"),  # no App Service authentication in front
    ],
    ids=["nothing", "master key", "principal name", "wrong key", "principal, no easy auth"],
)
def test_every_route_refuses_a_caller_without_a_verified_identity(
    ops_env: OpsEnv, headers: dict[str, str]
) -> None:
    for function in READS:
        status, answer = call(function, headers=headers)
        assert status == 401, function.__name__
        assert "operator" in answer["error"] or "sign in" in answer["error"]
    for function, key in CHANGES:
        assert change(function, key, headers)[0] == 401
    assert ops_env.audit_entries() == []


def test_a_key_in_the_url_is_refused_even_with_a_valid_identity(ops_env: OpsEnv) -> None:
    held = hold_lock("import-acme")
    try:
        status, answer = change(api.ops_break_lock, "import-acme", AS_OPERATOR, code="master")
        assert status == 400 and "never accepted in a URL" in answer["error"]
        assert call(api.ops_locks, params={"code": "k"}, headers=AS_OPERATOR)[0] == 400
        page = api.ops_status_page(
            func.HttpRequest("GET", "http://localhost/api/status", body=b"", params={"code": "k"})
        )
        assert page.status_code == 400
        assert held.ensure_held() is None and ops_env.audit_entries() == []
    finally:
        held.release()


def test_an_operator_principal_breaks_and_is_audited_by_its_verified_name(
    ops_env: OpsEnv, easy_auth: None
) -> None:
    held = hold_lock("import-acme")
    put_record("import-acme-2026-11-22", Status.COMPLETED, result={"imported": 3})
    try:
        who = {**principal("ada@example.com", "Ops.Operate", object_id="9f2e"),
               "x-ms-client-principal-name": "forged@example.com"}  # fmt: skip
        assert change(api.ops_break_lock, "import-acme", who)[0] == 200
        assert change(api.ops_reset_run, "import-acme-2026-11-22", who)[0] == 200
        entries = sorted(ops_env.audit_entries(), key=lambda e: str(e["action"]))
        assert [(e["action"], e["by"]) for e in entries] == [
            ("break", "ada@example.com (Entra object 9f2e)"),
            ("reset", "ada@example.com (Entra object 9f2e)"),
        ]
    finally:
        held.release()


def test_a_reader_reads_without_outcomes_and_cannot_operate(
    ops_env: OpsEnv, easy_auth: None
) -> None:
    put_record("import-acme-2026-11-22", Status.COMPLETED, result={"imported": 3})
    reader = principal("bob@example.com", "Ops.Read")
    status, runs = call(api.ops_runs, headers=reader)
    assert status == 200
    [run] = runs["items"]
    assert "outcome" not in run and run["state"] == "completed"
    [as_operator] = call(api.ops_runs)[1]["items"]
    assert as_operator["outcome"] == {"imported": 3}
    status, answer = change(api.ops_reset_run, "import-acme-2026-11-22", reader)
    assert status == 403 and "Ops.Operate" in answer["error"]
    assert call(api.ops_locks, headers=principal("eve@example.com"))[0] == 403  # no role


def test_easy_auth_claimed_but_not_on_is_refused_loudly(
    ops_env: OpsEnv, app_settings: AppSettings
) -> None:
    app_settings.set({"OPS_EASY_AUTH": "true", "WEBSITE_AUTH_ENABLED": None})
    status, answer = call(api.ops_locks, headers=principal("mallory", "Ops.Operate"))
    assert status == 503 and "WEBSITE_AUTH_ENABLED" in answer["error"]


def test_a_change_must_be_json_so_another_site_cannot_post_it(ops_env: OpsEnv) -> None:
    held = hold_lock("import-acme")
    try:
        status, answer = call(api.ops_break_lock, "POST", route_params={"key": "import-acme"},
                              body={"reason": "r"},
                              headers={**AS_OPERATOR, "Content-Type": "text/plain"})  # fmt: skip
        assert status == 400 and "application/json" in answer["error"]
    finally:
        held.release()


def test_no_member_id_in_any_operator_answer(ops_env: OpsEnv) -> None:
    """A run report's rejection samples hold member ids (often SSNs in 834 files)."""
    report = RunReport("acme", "2026-11-23", "2026-11-23", "nightly", token=4)
    rejected = FileReport("members.834", "834")
    rejected.reject("segment 40", "123-45-6789", "dependent", "INS02 is missing", line=40)
    report.files.append(rejected)
    report.finish("completed")
    container = storage.blob_service().get_container_client(report_container())
    container.create_container()
    container.upload_blob("acme/reports/2026-11-23/report.json", json.dumps(report.to_dict()))
    put_record("import-acme-2026-11-23", Status.COMPLETED, result={"member": "123-45-6789"})
    start_job("export-1", units=1)
    reads = (api.ops_locks, api.ops_jobs, api.ops_imports, api.ops_summary_last_hour)
    for function in reads:  # as the operator
        status, answer = call(function)
        assert status == 200
        text = json.dumps(answer)
        assert "123-45-6789" not in text and "member_id" not in text, function.__name__
    [imported] = call(api.ops_imports)[1]["items"]
    [sample] = imported["report"]["files"][0]["rejections"]
    assert sample == {"location": "segment 40", "line": 40, "reason": "INS02 is missing"}


def test_the_cli_makes_a_key_whose_digest_is_the_setting_entry(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert operators.main(["new-key", "alice"]) == 0
    out = capsys.readouterr().out.splitlines()
    key = out[0].rsplit(" ", 1)[1]
    entry = out[1].rsplit(" ", 1)[1]
    assert operators.parse_keys(entry) == (("alice", operators.key_digest(key)),)


@pytest.mark.parametrize("raw", ["alice", "alice=abc", "a b=" + "0" * 64, "x=" + "g" * 64])
def test_a_bad_key_setting_names_the_setting(raw: str) -> None:
    with pytest.raises(ValueError, match="OPS_OPERATOR_KEYS"):
        operators.parse_keys(raw)
