"""Every flow, run with real keys configured, leaves neither key nor health data in any log.

All records of every logger are captured at DEBUG (the SDKs' own HTTP logging included, which
logs request headers), with their arguments, exception text and `extra` dimensions, exactly
what would reach Application Insights. The storage key is Azurite's account key, used by
every storage request of the run; the SendGrid key is sent to Prism (SendGrid's own spec) in
an `Authorization` header.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from dataclasses import replace

import azure.functions as func
import pytest

from functions.imports import import_account
from functions.jobs import run_job_unit, start_job
from functions.notifications import send_notification
from harness import import_samples as samples
from harness import services
from harness.callbacks import CallbackReceiver
from shared import storage
from shared.imports.request import ImportRequest

STANDARD_ATTRIBUTES = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message"}


class EverythingHandler(logging.Handler):
    """Keeps each record as the text a log shipper could see: message, traceback, extras."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.texts: list[str] = []
        self.formatter = logging.Formatter()

    def emit(self, record: logging.LogRecord) -> None:
        parts = [record.getMessage()]
        if record.exc_info:
            parts.append(self.formatter.formatException(record.exc_info))
        extras = {k: v for k, v in vars(record).items() if k not in STANDARD_ATTRIBUTES}
        parts.append(repr(extras))
        self.texts.append("\n".join(parts))


@pytest.fixture
def every_log_record() -> Iterator[EverythingHandler]:
    handler = EverythingHandler()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


@pytest.fixture
def flows_env(
    app_env: dict[str, str], prism_url: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """Every flow's settings, with a SendGrid key (sent to Prism) and import report emails."""
    values = {
        **app_env,
        "SENDGRID_API_KEY": f"SG.{uuid.uuid4().hex}.{uuid.uuid4().hex}",
        "SENDGRID_HOST": prism_url,
        "IMPORT_REPORT_TO": "ops@example.com",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


def test_no_key_and_no_health_data_in_any_log_record(
    flows_env: dict[str, str], every_log_record: EverythingHandler, receiver: CallbackReceiver
) -> None:
    # Notification, sent through SendGrid's API (Prism) with the key in a header.
    body = {"event_id": f"evt-{uuid.uuid4().hex[:8]}", "type": "order.shipped",
            "to": ["someone@example.com"], "subject": "Shipped", "text": "On its way."}  # fmt: skip
    send_notification(func.QueueMessage(id="m1", body=json.dumps(body).encode()))

    # Nightly import of one account, valid and invalid members (rejected records too).
    # Names no log line could hold by chance (the samples' "LEE" or "ANA" might).
    members = [
        replace(m, first_name=f"Givenname{i:03d}", last_name=f"Surname{i:03d}")
        for i, m in enumerate(samples.members(40, bad_every=7))
    ]
    container = storage.blob_service().get_container_client(flows_env["IMPORTS_CONTAINER"])
    container.create_container()
    container.upload_blob("acme/incoming/members.csv", samples.csv_bytes(members))
    request = ImportRequest(account="acme", run_date="2026-11-22", run_id="2026-11-22")
    import_account(func.QueueMessage(id="m2", body=request.to_json().encode()))
    assert container.get_blob_client("acme/reports/2026-11-22/report.json").exists()

    # A batch job: submitted over HTTP, its units run from the queue.
    job = {"units": [{"id": f"u{i}", "payload": {"n": i}} for i in range(3)],
           "callback_url": receiver.url}  # fmt: skip
    response = start_job(func.HttpRequest("POST", "/api/jobs", body=json.dumps(job).encode()))
    assert response.status_code in (200, 202), response.get_body()
    units = storage.queue_client(flows_env["JOB_UNITS_QUEUE"])
    for message in units.receive_messages(max_messages=32):
        run_job_unit(func.QueueMessage(id=message.id, body=message.content))

    text = "\n".join(every_log_record.texts)
    assert len(every_log_record.texts) > 20, "the flows logged too little to prove anything"
    secrets = {
        "SendGrid API key": flows_env["SENDGRID_API_KEY"],
        "storage account key": services.AZURITE_KEY,
    }
    leaked = [name for name, value in secrets.items() if value in text]
    assert not leaked, f"secrets in the logs: {leaked}"
    health = {m.first_name for m in members} | {m.last_name for m in members}
    health |= {m.date_of_birth for m in members if len(m.date_of_birth) == 10}
    found = sorted(value for value in health if value in text)
    assert not found, f"health data in the logs: {found[:5]}"
