"""Fixtures for the devhost tests: the session's Azurite, the sample app, records of invocations."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from devhost_testkit import FUNCTION_KEY, HERE, SAMPLE_APP, Records, Shipped, StorageHelper

from devhost.supervisor import HostOptions, Supervisor
from harness import services


@pytest.fixture(scope="session")
def connection_string(azurite: services.Azurite) -> str:
    """The session's Azurite (tests/conftest.py)."""
    return azurite.connection_string


@pytest.fixture
def storage(connection_string: str) -> Iterator[StorageHelper]:
    helper = StorageHelper(connection_string)
    yield helper
    helper.close()  # idle keep-alive connections would delay Azurite's shutdown


@pytest.fixture
def records(tmp_path: Path) -> Records:
    return Records(tmp_path / "records.jsonl")


@pytest.fixture
def base_settings(connection_string: str, records: Records) -> dict[str, str | None]:
    """Settings for the sample app: its own queue, host id and record file for this test."""
    run = uuid.uuid4().hex[:8]
    return {
        "AzureWebJobsStorage": connection_string,
        "SAMPLE_QUEUE": f"sample-{run}",
        "SAMPLE_SCHEDULE": "0 0 0 1 1 *",  # yearly: never fires during a test by itself
        "SAMPLE_RECORD_FILE": str(records.path),
        "AzureFunctionsWebHost__hostid": f"test-{run}",
        "AzureFunctionsJobHost__extensions__queues__maxPollingInterval": "00:00:00.2",
        "DEVHOST_FUNCTION_KEY": FUNCTION_KEY,
        "LEASE_CONTAINER": f"locks-{run}",
    }


@pytest.fixture
def start_host() -> Iterator[Callable[..., Supervisor]]:
    """Start the sample app (or `app_module=` another app of this folder) in N instances;
    every host started is stopped after the test."""
    started: list[Supervisor] = []

    def start(settings: dict[str, str | None], **options: Any) -> Supervisor:
        options.setdefault("http_port", None)
        options.setdefault("app_module", SAMPLE_APP)
        supervisor = Supervisor(
            HostOptions(
                app_dir=str(HERE),
                settings=settings,
                drain_timeout=10.0,
                stats_interval=0.2,
                **options,
            )
        )
        supervisor.start()
        started.append(supervisor)
        return supervisor

    yield start
    for supervisor in started:
        supervisor.stop()


@pytest.fixture
def shipped() -> Iterator[Shipped]:
    """Every log record of the test as devhost ships it, with its invocation id."""
    handler = Shipped()
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield handler
    root.removeHandler(handler)
    root.setLevel(previous)
