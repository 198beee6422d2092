"""The app's settings on the session's Azurite, with queues and containers of this test's own."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture
def app_env(storage_env: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    suffix = uuid.uuid4().hex[:8]
    values = {
        "NOTIFICATIONS_QUEUE": f"notif-{suffix}",
        "EMAIL_FROM": "notifications@example.com",
        "SENDGRID_API_KEY": "",
        "JOBS_CONTAINER": f"jobs-{suffix}",
        "JOB_UNITS_QUEUE": f"units-{suffix}",
        "JOB_UNIT_HANDLER": "shared.jobs.handlers:echo",
        "IMPORTS_CONTAINER": f"imports-{suffix}",
        "IMPORT_QUEUE": f"imports-{suffix}",
        "MEMBERS_TABLE": f"Members{suffix}",
        "IMPORT_SCHEDULE": "0 0 2 * * *",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values
