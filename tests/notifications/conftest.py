"""Fixtures for the notification tests: Prism serving SendGrid's spec, with and without 429.

Storage and settings come from tests/conftest.py (`app_env` on the session's Azurite).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import services


@pytest.fixture(scope="session")
def sendgrid_url(prism_url: str) -> str:
    """Base URL of Prism serving the unchanged SendGrid Mail Send spec (tests/conftest.py)."""
    return prism_url


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
