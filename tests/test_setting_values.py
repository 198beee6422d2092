"""`shared.settings`: every numeric app setting is read by one parser, as strict everywhere."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from shared.imports.config import ImportSettings
from shared.jobs.config import JobSettings
from shared.notifications.sender import RetryPolicy
from shared.settings import InvalidSetting
from tests.support import AppSettings

READERS: list[tuple[str, Callable[[], Any], str, bool]] = [
    # (setting, what reads it, the field it sets, a count)
    ("JOB_MAX_UNITS", JobSettings.from_env, "max_units", True),
    ("JOB_CALLBACK_TIMEOUT", JobSettings.from_env, "callback_timeout", False),
    ("EMAIL_MAX_ATTEMPTS", RetryPolicy.from_settings, "max_attempts", True),
    ("EMAIL_BACKOFF_MAX_SECONDS", RetryPolicy.from_settings, "max_delay", False),
    ("IMPORT_WRITE_LANES", ImportSettings.from_env, "lanes", True),
]


@pytest.mark.parametrize(("name", "read", "field", "count"), READERS)
def test_a_number_setting_that_is_not_a_finite_number_in_range_fails_naming_it(
    app_settings: AppSettings, name: str, read: Callable[[], Any], field: str, count: bool
) -> None:
    refused = ["nan", "inf", "-1", "ten", *(["2.5"] if count else [])]
    for raw in refused:
        app_settings.set({name: raw})
        with pytest.raises(InvalidSetting, match=name):
            read()
    app_settings.set({name: None})
    default = getattr(read(), field)
    app_settings.set({name: ""})  # empty is unset, as the host reads an empty setting
    assert getattr(read(), field) == default
    app_settings.set({name: "3"})
    assert getattr(read(), field) == 3
