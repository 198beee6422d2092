"""`{occurrence}` keys: the schedule occurrence a timer invocation stands for, the same on every
instance however late or early it fires (the schedule read by `blobsingleton.schedules`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from azure.functions.timer import TimerRequest
from blobsingleton._keys import _occurrence
from blobsingleton.errors import KeyTemplateError

TONIGHT = datetime(2026, 11, 22, 2, tzinfo=UTC)
EARLY = TONIGHT - timedelta(milliseconds=400)


def test_an_early_firing_gets_tonights_run_once_key_not_yesterdays() -> None:
    """`@once("nightly-{occurrence}")` without a monitor: an early firing must not find
    yesterday's record and skip tonight's run."""
    timer = TimerRequest(past_due=False, schedule_status=None)

    def key(fired: datetime) -> str:
        return "nightly-" + _occurrence("nightly-{occurrence}", timer, "0 0 2 * * *", fired)

    yesterday = key(TONIGHT - timedelta(days=1) + timedelta(milliseconds=20))
    assert yesterday == "nightly-2026-11-21T02:00:00Z"
    assert key(EARLY) == "nightly-2026-11-22T02:00:00Z"


def test_an_impossible_date_is_a_key_template_error() -> None:
    with pytest.raises(KeyTemplateError):
        _occurrence("nightly-{occurrence}", TimerRequest(), "0 0 0 30 Feb *", TONIGHT)


def test_app_setting_placeholders_in_the_schedule_are_resolved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MY_SCHEDULE", "0 0 3 * * *")
    firing = datetime(2026, 1, 1, 3, 0, 0, 200_000, tzinfo=UTC)
    assert _occurrence("k-{occurrence}", TimerRequest(), "%MY_SCHEDULE%", firing) == (
        "2026-01-01T03:00:00Z"
    )
    monkeypatch.delenv("MY_SCHEDULE")
    with pytest.raises(KeyTemplateError, match="MY_SCHEDULE"):
        _occurrence("k-{occurrence}", TimerRequest(), "%MY_SCHEDULE%", firing)
