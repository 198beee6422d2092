"""EMAIL_IN_PROGRESS_SECONDS: how long a dead send holds its event id (and copies are deferred)."""

from __future__ import annotations

import os

import pytest

import functions.notifications as notifications
from functions.notifications import in_progress_seconds


def test_the_default_is_the_librarys_15_s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EMAIL_IN_PROGRESS_SECONDS", raising=False)
    assert in_progress_seconds() == 15.0
    monkeypatch.setenv("EMAIL_IN_PROGRESS_SECONDS", "")
    assert in_progress_seconds() == 15.0


def test_a_number_of_seconds_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMAIL_IN_PROGRESS_SECONDS", "2.5")
    assert in_progress_seconds() == 2.5


@pytest.mark.parametrize("raw", ["soon", "0", "0.5", "301", "-3", "nan"])
def test_anything_else_is_refused_with_the_setting_named(
    raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EMAIL_IN_PROGRESS_SECONDS", raw)
    with pytest.raises(ValueError, match="EMAIL_IN_PROGRESS_SECONDS"):
        in_progress_seconds()


def test_the_app_was_indexed_with_the_setting_of_its_process() -> None:
    """tests/conftest.py sets 5 s before the app is imported; the module took it."""
    assert os.environ["EMAIL_IN_PROGRESS_SECONDS"] == "5"
    assert notifications.IN_PROGRESS_SECONDS == 5.0


def test_one_sender_per_process_until_its_settings_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Built once per distinct settings, not per message (a SendGrid client per message
    cost a TLS handshake each); a changed setting builds a new one."""
    from shared.notifications.sender import sender_from_settings

    monkeypatch.setenv("SENDGRID_API_KEY", "SG.test-key")
    monkeypatch.setenv("EMAIL_FROM", "notifications@example.com")
    first = sender_from_settings()
    assert sender_from_settings() is first
    monkeypatch.setenv("EMAIL_FROM", "alerts@example.com")
    assert sender_from_settings() is not first
