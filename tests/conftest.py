"""Fixtures shared by every test: a real Azurite per session, Prism for the SendGrid contract.

Integration tests talk to real services over HTTP; nothing here mocks storage.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from devhost import request_counting, services  # noqa: E402
from devhost.scenarios._callbacks import CallbackReceiver  # noqa: E402

request_counting.install()  # tests count storage requests as the host and benchmarks do


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long",
        action="store_true",
        help="also run the long variants (marked `long`): `make test-long`",
    )


def pytest_configure(config: pytest.Config) -> None:
    from hypothesis import settings

    # No deadline: the machine is shared, and a slow example is not a wrong one.
    settings.register_profile("default", deadline=None, max_examples=100)
    settings.register_profile("long", deadline=None, max_examples=3000)
    settings.load_profile("long" if config.getoption("--long") else "default")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--long"):
        return
    skip = pytest.mark.skip(reason="long variant: run with --long (make test-long)")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def azurite() -> Iterator[services.Azurite]:
    """One Azurite for the session, on free ports, with its own data folder."""
    with services.azurite() as instance:
        yield instance


@pytest.fixture
def storage_env(azurite: services.Azurite, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point the app at the session's Azurite, with containers of its own for this test."""
    suffix = uuid.uuid4().hex[:10]
    # One app: this checkout, as a local host sees it (its namespace is the local host id).
    monkeypatch.delenv("WEBSITE_INSTANCE_ID", raising=False)
    monkeypatch.setenv("AzureWebJobsScriptRoot", str(ROOT))
    monkeypatch.setenv("AzureWebJobsStorage", azurite.connection_string)
    monkeypatch.setenv("LEASE_CONTAINER", f"locks-{suffix}")
    monkeypatch.setenv("RUNONCE_CONTAINER", f"runonce-{suffix}")
    monkeypatch.setenv("EMAIL_OUTBOX_CONTAINER", f"outbox-{suffix}")
    return azurite.connection_string


@pytest.fixture
def app_env(storage_env: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Every flow's settings on the session's Azurite, with queues, containers and a table of
    this test's own; email goes to the local outbox (no SendGrid key)."""
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


@pytest.fixture(scope="session")
def prism_url() -> Iterator[str]:
    """Prism serving SendGrid's official Mail Send OpenAPI spec as a validating mock."""
    with services.prism() as url:
        yield url


@pytest.fixture
def subprocess_env(storage_env: str) -> dict[str, str]:
    """Environment for child processes racing against the same Azurite and containers."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    return env


@pytest.fixture
def receiver() -> Iterator[CallbackReceiver]:
    """A recording HTTP receiver for batch-job callbacks, on a free local port."""
    with CallbackReceiver() as running:
        yield running
