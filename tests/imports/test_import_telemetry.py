"""What an import tells an operator through OpenTelemetry (shared.telemetry), read with the
SDK's in-memory exporters against Azurite: records and rejects counted once however many
invocations and crashes a run takes, checkpoints, resumes, one span per invocation and file."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest
from opentelemetry.trace import StatusCode

from harness import import_samples as samples
from shared.imports.importer import run_import
from shared.imports.layout import Layout
from shared.imports.request import ImportRequest
from tests.imports.support import ImportsEnv, killed_before_sweep_checkpoint
from tests.otel import Telemetry
from tests.support import AppSettings

RUN = ImportRequest.nightly("acme", date(2026, 11, 22))


def _until_done(token: int, **options: Any) -> list[str]:
    statuses: list[str] = []
    while not statuses or statuses[-1] != "completed":
        statuses.append(run_import(RUN, token + len(statuses), email=False, **options).status)
        assert len(statuses) < 50
    return statuses


def _totals(imports_env: ImportsEnv) -> dict[str, Any]:
    return dict(imports_env.read_json(Layout(RUN.account, RUN.run_id).report)["totals"])


def test_a_run_over_invocations_counts_each_record_once_with_its_resumes_and_spans(
    imports_env: ImportsEnv, telemetry: Telemetry
) -> None:
    imports_env.upload("acme", "members.csv",
                       samples.csv_bytes(list(samples.members(350, bad_every=50))))  # fmt: skip
    statuses = _until_done(10, budget_s=0, chunk_size=100)
    assert statuses == ["continued"] * 3 + ["completed"]
    totals = _totals(imports_env)
    assert (totals["imported"], totals["rejected"]) == (343, 7)
    # the metrics say what the report says, once: no account attribute (none configured)
    assert telemetry.added_by("app.imports.records") == {
        (("outcome", "imported"),): 343, (("outcome", "rejected"),): 7,
    }  # fmt: skip
    assert telemetry.added("app.imports.resumes") == 3
    assert telemetry.added("app.imports.runs", status="continued") == 3
    assert telemetry.added("app.imports.runs", status="completed") == 1
    assert telemetry.added("app.imports.checkpoints", phase="members") == 3
    assert telemetry.added("app.imports.checkpoints", phase="sweep") == 1
    assert telemetry.added_by("app.imports.files") == {
        (("kind", "csv"), ("status", "processed")): 1
    }
    runs = telemetry.spans("import run")
    assert len(runs) == 4
    attributes = [dict(s.attributes or {}) for s in runs]
    assert [a["app.import.status"] for a in attributes] == statuses
    assert [a.get("app.import.invocation") for a in attributes] == [None, 2, 3, 4]
    assert all(a["app.import.account"] == "acme" for a in attributes)
    assert [a["app.import.token"] for a in attributes] == [10, 11, 12, 13]
    last = attributes[-1]
    assert (last["app.import.records"], last["app.import.imported"],
            last["app.import.rejected"]) == (350, 343, 7)  # fmt: skip
    # the budget running out is how a run continues, not an error
    assert all(s.status.status_code != StatusCode.ERROR for s in runs)
    files = telemetry.spans("import file")
    assert len(files) == 4  # one file, carried over four invocations
    assert [s.parent.span_id for s in files if s.parent] == [s.context.span_id for s in runs]
    assert dict(files[-1].attributes or {})["app.import.file_status"] == "processed"
    assert "members.csv" not in str([dict(s.attributes or {}) for s in files])  # no file names


def test_a_crash_after_a_commit_before_its_checkpoint_counts_the_redone_chunk_once(
    imports_env: ImportsEnv,
    telemetry: Telemetry,
    monkeypatch: pytest.MonkeyPatch,
    app_settings: AppSettings,
) -> None:
    """The chunk the dead attempt committed but did not checkpoint is redone by the next:
    counted at the checkpoint, it is counted once. With IMPORT_ACCOUNTS (a fixed set) the
    account is an attribute; one not in it is not."""
    app_settings.set({"IMPORT_ACCOUNTS": "acme,beta"})
    imports_env.upload("acme", "members.csv",
                       samples.csv_bytes(list(samples.members(120, bad_every=40))))  # fmt: skip
    killed_before_sweep_checkpoint(
        monkeypatch, lambda: run_import(RUN, 10, email=False, chunk_size=50)
    )
    assert _until_done(11, chunk_size=50) == ["completed"]
    totals = _totals(imports_env)
    assert (totals["imported"], totals["rejected"]) == (117, 3)
    assert telemetry.added_by("app.imports.records") == {
        (("account", "acme"), ("outcome", "imported")): 117,
        (("account", "acme"), ("outcome", "rejected")): 3,
    }
    assert telemetry.added("app.imports.resumes") == 1
    dead, resumed = telemetry.spans("import run")
    assert dead.status.status_code == StatusCode.ERROR
    assert dead.status.description == "Killed"  # the type only, never a message
    assert dict(resumed.attributes or {})["app.import.invocation"] == 2
