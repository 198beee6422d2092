"""The lease, `@once` and the three flows on identity-based storage: bearer tokens, no key."""

from __future__ import annotations

import json
import uuid

import azure.functions as func
import blobsingleton
import blobsingleton.config
import pytest
from blobsingleton import BlobLease, once
from blobsingleton.errors import SettingMissing

from harness import import_samples as samples
from harness import services
from harness.callbacks import CallbackReceiver
from shared import storage
from shared.imports.member_table import is_member_row
from shared.imports.request import ImportRequest
from shared.notifications import read_outbox
from tests.identity.conftest import EntraLikeCredential


def test_azurite_runs_in_oauth_mode_over_https(oauth_azurite: services.Azurite) -> None:
    assert oauth_azurite.certificate is not None
    assert oauth_azurite.service_url("blob").startswith("https://")


def test_lease_and_once_work_with_a_token_credential(identity_env: EntraLikeCredential) -> None:
    with BlobLease(f"id-{uuid.uuid4().hex[:8]}") as lease:
        assert lease.is_held and lease.token >= 1
    runs: list[str] = []

    @once("identity-{key}")
    def work(key: str) -> str:
        runs.append(key)
        return f"done {key}"

    assert work("k1") == "done k1" and work("k1") == "done k1"
    assert runs == ["k1"]
    assert identity_env.calls >= 1  # the injected credential, not a key, signed the requests


def test_notification_flow_on_identity_storage(
    identity_env: EntraLikeCredential, monkeypatch: pytest.MonkeyPatch
) -> None:
    from functions.notifications import send_notification

    monkeypatch.setenv("NOTIFICATIONS_QUEUE", f"ntf-{uuid.uuid4().hex[:8]}")
    monkeypatch.delenv("SENDGRID_API_KEY", raising=False)
    event_id = f"evt-{uuid.uuid4().hex[:8]}"
    body = {"event_id": event_id, "type": "t", "to": "a@example.com", "subject": "s", "text": "x"}
    for copy in range(3):
        send_notification(func.QueueMessage(id=f"c{copy}", body=json.dumps(body).encode()))
    assert len(read_outbox(event_id=event_id)) == 1


def test_import_flow_on_identity_storage(
    identity_env: EntraLikeCredential, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blob (files, reports), Table (members, fenced state) and queue, all by token."""
    from functions.imports import import_account

    suffix = uuid.uuid4().hex[:8]
    monkeypatch.setenv("IMPORTS_CONTAINER", f"imports-{suffix}")
    monkeypatch.setenv("MEMBERS_TABLE", f"Members{suffix}")
    monkeypatch.setenv("IMPORT_QUEUE", f"imports-{suffix}")
    monkeypatch.setenv("NOTIFICATIONS_QUEUE", f"ntf-{suffix}")
    monkeypatch.setenv("IMPORT_SCHEDULE", "0 0 2 * * *")
    container = storage.blob_service().get_container_client(f"imports-{suffix}")
    container.create_container()
    container.upload_blob("acme/incoming/m.csv", samples.csv_bytes(list(samples.members(30))))
    request = ImportRequest(account="acme", run_date="2026-11-22", run_id="2026-11-22")
    import_account(func.QueueMessage(id="m1", body=request.to_json().encode()))
    table = storage.table_service().get_table_client(f"Members{suffix}")
    members = [e for e in table.list_entities() if is_member_row(e["RowKey"])]
    assert len(members) == 30


def test_batch_job_flow_on_identity_storage(
    identity_env: EntraLikeCredential, monkeypatch: pytest.MonkeyPatch, receiver: CallbackReceiver
) -> None:
    from functions.jobs import get_job, run_job_unit, start_job

    suffix = uuid.uuid4().hex[:8]
    monkeypatch.setenv("JOBS_CONTAINER", f"jobs-{suffix}")
    monkeypatch.setenv("JOB_UNITS_QUEUE", f"units-{suffix}")
    monkeypatch.setenv("JOB_UNIT_HANDLER", "shared.jobs.handlers:echo")
    job = {"job_id": f"job-{suffix}", "units": [{"id": "u1"}, {"id": "u2"}],
           "callback_url": receiver.url}  # fmt: skip
    response = start_job(func.HttpRequest("POST", "/api/jobs", body=json.dumps(job).encode()))
    assert response.status_code == 202, response.get_body()
    for message in storage.queue_client(f"units-{suffix}").receive_messages(max_messages=32):
        run_job_unit(func.QueueMessage(id=message.id, body=message.content))
    status = get_job(
        func.HttpRequest("GET", "/api/jobs/x", body=b"", route_params={"job_id": job["job_id"]})
    )
    assert json.loads(status.get_body())["units_done"] == 2
    assert [post.job_id for post in receiver.posts] == [job["job_id"]]


def test_a_connection_string_and_identity_settings_together_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AzureWebJobsStorage", "UseDevelopmentStorage=true")
    monkeypatch.setenv("AzureWebJobsStorage__blobServiceUri", "https://a.blob.core.windows.net")
    with pytest.raises(SettingMissing) as refused:
        blobsingleton.config.from_settings("AzureWebJobsStorage")
    message = str(refused.value)
    assert "AzureWebJobsStorage" in message and "AzureWebJobsStorage__blobServiceUri" in message


def test_neither_a_connection_string_nor_identity_settings_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for suffix in ("", "__accountName", "__blobServiceUri", "__queueServiceUri"):
        monkeypatch.delenv(f"AzureWebJobsStorage{suffix}", raising=False)
    with pytest.raises(SettingMissing) as refused:
        blobsingleton.config.from_settings("AzureWebJobsStorage")
    assert "AzureWebJobsStorage__accountName" in str(refused.value)
