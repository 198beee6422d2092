"""Fixtures for the import tests: per-test container, table and queues on the session Azurite."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from shared import storage
from tests.imports.pyx12_oracle import Oracle
from tests.imports.support import ImportsEnv
from tests.support import AppSettings


@pytest.fixture
def imports_env(storage_env: str, app_settings: AppSettings) -> ImportsEnv:
    """Nightly-import settings of this test's own (container, table, queues), queues created."""
    suffix = uuid.uuid4().hex[:10]
    env = ImportsEnv(
        container=f"imports-{suffix}",
        table=f"Members{suffix}",
        queue=f"imports-{suffix}",
        notifications_queue=f"ntf-{suffix}",
    )
    app_settings.set(
        {
            "IMPORTS_CONTAINER": env.container,
            "MEMBERS_TABLE": env.table,
            "IMPORT_QUEUE": env.queue,
            "NOTIFICATIONS_QUEUE": env.notifications_queue,
            "IMPORT_SCHEDULE": "0 0 2 * * *",
            "IMPORT_REPORT_TO": "ops@example.com",
            "IMPORT_ACCOUNTS": None,
        }
    )
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


@pytest.fixture(scope="session", autouse=True)
def pyx12_speedups() -> None:
    """The reader's speed-ups installed in pyx12, as the importer does when a run starts:
    every reader test reads as production does, whatever ran before it."""
    from shared.imports.x12 import speedups

    speedups.install()


@pytest.fixture(scope="session")
def pyx12_oracle() -> Iterator[Oracle]:
    """pyx12 as published, in a process that never installs the speed-ups."""
    oracle = Oracle()
    try:
        yield oracle
    finally:
        oracle.close()
