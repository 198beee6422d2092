"""The nightly fan-out's timer policies against Azurite (issue 49): a night missed by more
than a day is recorded missed, the latest within a day is caught up once; the external
scheduler's call (POST /api/imports/nightly) and the timer run one occurrence once."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import azure.functions as func
from blobsingleton.schedules import previous_occurrence
from blobsingleton.timers import Outcome, catch_up_timer, ledger_of

from functions.imports import fan_out_night, nightly_import, run_nightly_now
from harness import import_samples as samples
from tests.imports.support import ImportsEnv


def last_night() -> datetime:
    return previous_occurrence("0 0 2 * * *", datetime.now(UTC))


def post(occurrence: datetime | str | None = None) -> tuple[int, dict[str, object]]:
    params = (
        {}
        if occurrence is None
        else {"occurrence": occurrence if isinstance(occurrence, str) else occurrence.isoformat()}
    )
    request = func.HttpRequest("POST", "/api/imports/nightly", body=b"", params=params)
    response = run_nightly_now(request)
    return response.status_code, json.loads(response.get_body())


def test_the_latest_missed_night_within_a_day_is_caught_up_and_older_ones_recorded_missed(
    imports_env: ImportsEnv,
) -> None:
    imports_env.upload("acme", "a.csv", samples.csv_bytes(list(samples.members(2))))
    night = last_night()
    settled = night - timedelta(days=3)
    nightly_import(catch_up_timer(settled))  # three days late: recorded missed, never run
    assert ledger_of(fan_out_night).entry(settled).outcome == Outcome.MISSED  # type: ignore[union-attr]
    for _ in range(3):  # the host's past-due run of last night, on every instance
        nightly_import(catch_up_timer(night))
    ledger = ledger_of(fan_out_night)
    outcomes = [str(ledger.entry(night - timedelta(days=d)).outcome) for d in (2, 1, 0)]  # type: ignore[union-attr]
    # (last night "ran" if this runs within the grace minute after 02:00)
    assert outcomes in (["missed", "missed", "caught_up"], ["missed", "missed", "ran"])
    bodies = imports_env.messages(imports_env.queue)
    assert [(b["account"], b["run_id"]) for b in bodies] == [("acme", night.date().isoformat())]
    status, body = post(night - timedelta(days=1))  # recorded missed, and over a day late
    assert status == 409 and "outside the catch-up window" in str(body["detail"])


def test_the_external_schedulers_call_and_the_timer_run_a_night_once(
    imports_env: ImportsEnv,
) -> None:
    imports_env.upload("acme", "a.csv", samples.csv_bytes(list(samples.members(2))))
    night = last_night()
    status, summary = post()  # the latest due night
    assert status == 200 and summary["run_date"] == night.date().isoformat()
    assert fan_out_night(catch_up_timer(night)) == summary  # the timer: its stored summary
    assert post(night)[1] == summary
    assert len(imports_env.messages(imports_env.queue)) == 1


def test_a_call_outside_the_window_is_refused_with_its_reason(imports_env: ImportsEnv) -> None:
    status, body = post(last_night() - timedelta(days=2))
    assert status == 409 and "outside the catch-up window" in str(body["detail"])
    assert post("yesterday")[0] == 400
    assert post(last_night() + timedelta(days=1))[0] == 409  # not due yet
    assert imports_env.messages(imports_env.queue) == []
