"""Fixtures for the import tests: per-test container, table and queues on the session Azurite."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from shared import storage
from tests.imports.support import ImportsEnv


@pytest.fixture
def imports_env(storage_env: str, monkeypatch: pytest.MonkeyPatch) -> ImportsEnv:
    suffix = uuid.uuid4().hex[:10]
    env = ImportsEnv(
        container=f"imports-{suffix}",
        table=f"Members{suffix}",
        queue=f"imports-{suffix}",
        notifications_queue=f"ntf-{suffix}",
    )
    monkeypatch.setenv("IMPORTS_CONTAINER", env.container)
    monkeypatch.setenv("MEMBERS_TABLE", env.table)
    monkeypatch.setenv("IMPORT_QUEUE", env.queue)
    monkeypatch.setenv("NOTIFICATIONS_QUEUE", env.notifications_queue)
    monkeypatch.setenv("IMPORT_SCHEDULE", "0 0 2 * * *")
    monkeypatch.setenv("IMPORT_REPORT_TO", "ops@example.com")
    monkeypatch.delenv("IMPORT_ACCOUNTS", raising=False)
    for queue in (env.queue, env.notifications_queue):
        storage.queue_client(queue).create_queue()
    return env


@pytest.fixture
def no_health_data_in(caplog: pytest.LogCaptureFixture) -> Callable[[list[str]], None]:
    """Assert that none of the given values (names, birth dates) appeared in any log record."""

    def check(values: list[str]) -> None:
        text = "\n".join(record.getMessage() for record in caplog.records)
        leaked = sorted({v for v in values if v and v in text})
        assert not leaked, f"health data in the logs: {leaked[:5]}"

    return check
