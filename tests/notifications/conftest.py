"""Fixtures for the notification tests: Prism serving SendGrid's spec, and Azurite storage.

Reuse the session fixtures of tests/conftest.py (`prism_url`, `azurite`) when they exist and
start their own otherwise, so this folder also runs on its own.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devhost import services


def _shared_or_own(request: pytest.FixtureRequest, name: str, start: Any) -> Iterator[Any]:
    try:
        value = request.getfixturevalue(name)
    except pytest.FixtureLookupError:
        with start() as value:
            yield value
        return
    yield value


@pytest.fixture(scope="session")
def sendgrid_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """Base URL of Prism serving the unchanged SendGrid Mail Send spec."""
    yield from _shared_or_own(request, "prism_url", services.prism)


@pytest.fixture(scope="session")
def sendgrid_429_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Prism serving the SendGrid spec plus the 429 response the live API documents.

    The published OpenAPI file lists no 429 for /v3/mail/send, so Prism answers
    `Prefer: code=429` with a 404 there. SendGrid's rate-limit docs describe 429 Too Many
    Requests; this copy adds it (with a Retry-After header) and changes nothing else.
    """
    spec = json.loads(services.SENDGRID_SPEC.read_text())
    spec["paths"]["/v3/mail/send"]["post"]["responses"]["429"] = {
        "description": "Too many requests",
        "headers": {"Retry-After": {"schema": {"type": "integer"}, "example": 7}},
        "content": {
            "application/json": {
                "schema": {"$ref": "#/components/schemas/ErrorResponse"},
                "example": {"errors": [{"message": "too many requests"}]},
            }
        },
    }
    path: Path = tmp_path_factory.mktemp("sendgrid-spec") / "tsg_mail_v3_with_429.json"
    path.write_text(json.dumps(spec))
    with services.prism(path) as url:
        yield url


@pytest.fixture(scope="session")
def azurite_storage(request: pytest.FixtureRequest) -> Iterator[services.Azurite]:
    """A real Azurite (the shared one if tests/conftest.py provides it)."""
    yield from _shared_or_own(request, "azurite", services.azurite)


@pytest.fixture
def app_env(azurite_storage: services.Azurite, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """App settings of one test: Azurite storage, and containers and queues of its own."""
    suffix = uuid.uuid4().hex[:10]
    values = {
        "AzureWebJobsStorage": azurite_storage.connection_string,
        "NOTIFICATIONS_QUEUE": f"notifications-{suffix}",
        "EMAIL_FROM": "notifications@example.com",
        "EMAIL_OUTBOX_CONTAINER": f"outbox-{suffix}",
        "LEASE_CONTAINER": f"locks-{suffix}",
        "RUNONCE_CONTAINER": f"runonce-{suffix}",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    for name in ("SENDGRID_API_KEY", "SENDGRID_HOST", "EMAIL_FROM_NAME"):
        monkeypatch.delenv(name, raising=False)
    return values
