"""Fixtures shared by every test: a real Azurite per session, Prism for the SendGrid contract,
app settings of each test's own, the app indexed as a worker indexes it, and the `services`
marker.

Integration tests talk to real services over HTTP; nothing here mocks storage. A test that
uses Azurite, Prism or child processes is marked `services` here, from the fixtures it uses
(or by a `pytestmark` in its file when it starts them itself): `make test-fast` runs the
others (`pytest -m "not services"`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from blobsingleton.leases import release_all

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from devhost import request_counting  # noqa: E402
from harness import services  # noqa: E402
from harness.callbacks import RECEIVER_SETTINGS, CallbackReceiver  # noqa: E402
from harness.fault_proxy import FaultRates  # noqa: E402
from tests import durations  # noqa: E402
from tests.otel import Telemetry  # noqa: E402
from tests.support import AppSettings, ScriptedProxy, child_env, fresh_functions  # noqa: E402

request_counting.install()  # tests count storage requests as the host and benchmarks do
# A send whose instance died holds its event id this long (15 s by default): a copy arriving
# during a send is deferred as long, so the notification flows wait 6 s for it here, not 16.
# Set before function_app is imported (the decorator reads it); child processes inherit it.
os.environ.setdefault("EMAIL_IN_PROGRESS_SECONDS", "5")


def pytest_addoption(parser: pytest.Parser) -> None:
    with contextlib.suppress(ValueError):  # the library's conftest may have added it first
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


# Fixtures that start a service or let a test start processes; every fixture built on them
# (storage_env, app_env, jobs_env, start_host, ...) has them among its item's fixture names.
SERVICE_FIXTURES = frozenset(
    {"azurite", "oauth_azurite", "prism_url", "sendgrid_429_url", "subprocess_env"}
)


def needs_services(item: pytest.Item) -> bool:
    """Whether the test uses Azurite, Prism or child processes (by fixture or by mark)."""
    names = set(getattr(item, "fixturenames", ()))
    return bool(names & SERVICE_FIXTURES) or item.get_closest_marker("services") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    durations.longest_files_first(items)  # the order pytest-xdist hands files out in
    for item in items:
        if needs_services(item) and item.get_closest_marker("services") is None:
            item.add_marker(pytest.mark.services)
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
        # A lease a test left held would be released at exit against a stopped Azurite, each
        # attempt waiting out the storage client's retries (80 s): give them back while it runs.
        release_all()


@pytest.fixture
def app_settings(monkeypatch: pytest.MonkeyPatch) -> AppSettings:
    """The one way tests override app settings: `app_settings.set({...})`."""
    return AppSettings(monkeypatch)


@pytest.fixture
def storage_env(azurite: services.Azurite, app_settings: AppSettings) -> str:
    """Point the app at the session's Azurite, with containers of its own for this test."""
    suffix = uuid.uuid4().hex[:10]
    app_settings.set(
        {
            # One app: this checkout, as a local host sees it (its namespace: the local host id).
            "WEBSITE_INSTANCE_ID": None,
            "AzureWebJobsScriptRoot": str(ROOT),
            "AzureWebJobsStorage": azurite.connection_string,
            "LEASE_CONTAINER": f"locks-{suffix}",
            "RUNONCE_CONTAINER": f"runonce-{suffix}",
            "EMAIL_OUTBOX_CONTAINER": f"outbox-{suffix}",
        }
    )
    return azurite.connection_string


@pytest.fixture
def app_env(storage_env: str, app_settings: AppSettings) -> dict[str, str]:
    """Every flow's settings on the session's Azurite, with queues, containers and a table of
    this test's own; email goes to the local outbox (no SendGrid key, host or sender name).
    Returns every setting it made, storage and containers included."""
    suffix = uuid.uuid4().hex[:8]
    values: dict[str, str | None] = {
        "NOTIFICATIONS_QUEUE": f"notif-{suffix}",
        "EMAIL_FROM": "notifications@example.com",
        "SENDGRID_API_KEY": None,
        "JOBS_CONTAINER": f"jobs-{suffix}",
        "JOB_UNITS_QUEUE": f"units-{suffix}",
        "JOB_UNIT_HANDLER": "shared.jobs.handlers:echo",
        "IMPORTS_CONTAINER": f"imports-{suffix}",
        "IMPORT_QUEUE": f"imports-{suffix}",
        "MEMBERS_TABLE": f"Members{suffix}",
        "IMPORT_SCHEDULE": "0 0 2 * * *",
        "SENDGRID_HOST": None,
        "EMAIL_FROM_NAME": None,
    }
    app_settings.set(values)
    return {
        name: os.environ[name]
        for name in (
            "AzureWebJobsStorage",
            "LEASE_CONTAINER",
            "RUNONCE_CONTAINER",
            "EMAIL_OUTBOX_CONTAINER",
            *(name for name, value in values.items() if value is not None),
        )
    }


@pytest.fixture(scope="session")
def prism_url() -> Iterator[str]:
    """Prism serving SendGrid's official Mail Send OpenAPI spec as a validating mock."""
    with services.prism() as url:
        yield url


@pytest.fixture
def subprocess_env(storage_env: str) -> dict[str, str]:
    """Environment for child processes racing against the same Azurite and containers."""
    return child_env()


@pytest.fixture
def telemetry() -> Telemetry:
    """The OpenTelemetry SDK's in-memory exporters on the global providers (tests/otel.py):
    what this test added to the app's and the library's spans and metrics."""
    return Telemetry()


@pytest.fixture
def app_functions() -> dict[str, Any]:
    """function_app's functions by name, indexed as a fresh worker indexes them."""
    import function_app

    return fresh_functions(function_app.app)


@pytest.fixture
def receiver(app_settings: AppSettings) -> Iterator[CallbackReceiver]:
    """A recording HTTP receiver for batch-job callbacks, on a free local port, and the app
    settings that allow the app to call it (loopback, plain http: refused by default)."""
    app_settings.set(RECEIVER_SETTINGS)
    with CallbackReceiver() as running:
        yield running


@dataclass
class ServerErrors:
    """A scripted fault proxy in front of each of the session Azurite's services, the app's
    storage (AzureWebJobsStorage) going through them: `blob.arm("server_busy", when)` answers
    the next matching request as Azure does under load."""

    blob: ScriptedProxy
    queue: ScriptedProxy
    table: ScriptedProxy
    connection_string: str


@pytest.fixture
def server_errors(
    storage_env: str, azurite: services.Azurite, app_settings: AppSettings
) -> Iterator[ServerErrors]:
    """The app's storage through `ScriptedProxy`s (nothing injected until armed). Its clients
    (the library's and the app's, one account) retry within `blobsingleton.config.RETRY`,
    about a second apart."""
    ports = {"blob": azurite.blob_port, "queue": azurite.queue_port, "table": azurite.table_port}
    proxies = {name: ScriptedProxy(port, FaultRates(), seed=0, service=name)
               for name, port in ports.items()}  # fmt: skip
    for proxy in proxies.values():
        proxy.start()
    connection = services.azurite_connection_string(
        "127.0.0.1", *(proxies[name].listen_port for name in ("blob", "queue", "table"))
    )
    app_settings.set({"AzureWebJobsStorage": connection})
    try:
        yield ServerErrors(proxies["blob"], proxies["queue"], proxies["table"], connection)
    finally:
        for proxy in proxies.values():
            proxy.stop()
