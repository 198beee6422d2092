"""The job functions called as the host calls them, on real bindings and a real Azurite."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import azure.functions as func
import pytest
from azure.functions.timer import TimerRequest
from blobsingleton.schedules import previous_occurrence
from blobsingleton.timers import catch_up_timer

from functions.jobs import fail_job_unit, get_job, run_job_unit, start_job, watch_jobs
from harness.callbacks import CallbackReceiver
from shared.jobs import JobSettings, JobStore, UnitState, record_unit
from tests.jobs.conftest import receive_all, run_announcements, run_units, units


def post_job(body: Any) -> func.HttpResponse:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return start_job(func.HttpRequest("POST", "http://localhost/api/jobs", body=raw))


def get(job_id: str) -> func.HttpResponse:
    request = func.HttpRequest(
        "GET", f"http://localhost/api/jobs/{job_id}", body=b"", route_params={"job_id": job_id}
    )
    return get_job(request)


def body_of(response: func.HttpResponse) -> dict[str, Any]:
    return json.loads(response.get_body())


def test_post_runs_the_job_and_get_reports_it(
    jobs_env: JobSettings, receiver: CallbackReceiver
) -> None:
    response = post_job({"job_id": "j1", "units": units(5), "callback_url": receiver.url})
    assert response.status_code == 202
    assert body_of(response) == {
        "job_id": "j1",
        "status": "running",
        "units": 5,
        "status_url": "/api/jobs/j1",
    }
    assert body_of(get("j1"))["units_outstanding"] == 5
    assert run_units(jobs_env) == 5
    [post] = receiver.posts
    assert post.body["units_done"] == 5
    done = body_of(get("j1"))
    assert (done["status"], done["archived"], done["units_outstanding"]) == ("succeeded", True, 0)


def test_resubmitting_the_same_job_is_idempotent_and_a_different_one_conflicts(
    jobs_env: JobSettings, receiver: CallbackReceiver
) -> None:
    job = {"job_id": "same", "units": units(2), "callback_url": receiver.url}
    assert post_job(job).status_code == 202
    assert post_job(job).status_code == 200
    other = post_job({**job, "units": units(3)})
    assert (other.status_code, body_of(other)["error"]) == (409, "job_exists")
    run_units(jobs_env)
    finished = post_job(job)  # after the archive: the same job answers with its outcome
    assert (finished.status_code, body_of(finished)["status"]) == (200, "succeeded")
    assert len(receiver.posts) == 1


def test_a_finished_job_id_cannot_be_reused_for_another_job(
    jobs_env: JobSettings, receiver: CallbackReceiver
) -> None:
    post_job({"job_id": "once", "units": [], "callback_url": receiver.url})
    run_announcements(jobs_env)
    again = post_job({"job_id": "once", "units": units(1), "callback_url": receiver.url})
    assert again.status_code == 409
    assert "cannot be reused" in body_of(again)["message"]


def test_zero_units_answers_the_final_status_and_posts_once_from_the_queue(
    jobs_env: JobSettings, receiver: CallbackReceiver
) -> None:
    """The callback of a job with nothing to wait for is never POSTed inside the request."""
    response = post_job({"job_id": "zero", "units": [], "callback_url": receiver.url})
    assert body_of(response)["status"] == "succeeded"
    assert receiver.posts == []
    assert run_announcements(jobs_env) == 1
    assert [p.body["units_done"] for p in receiver.posts] == [0]
    assert body_of(get("zero"))["archived"] is True


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"{", "$"),
        ({"units": [{"id": "a"}, {"id": "a"}], "callback_url": "http://127.0.0.1/"}, "units[1].id"),
        ({"units": [], "callback_url": "http://example.com/cb"}, "callback_url"),
        ({"units": [], "callback_url": "https://169.254.169.254/"}, "callback_url"),
    ],
)
def test_bad_requests_get_a_400_naming_the_field(
    jobs_env: JobSettings, body: Any, field: str
) -> None:
    response = post_job(body)
    assert response.status_code == 400
    error = body_of(response)
    assert error["error"] == "invalid_job"
    assert field in {p["field"] for p in error["problems"]}


def test_the_unit_limit_is_the_app_setting(
    jobs_env: JobSettings, receiver: CallbackReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOB_MAX_UNITS", "3")
    response = post_job({"units": units(4), "callback_url": receiver.url})
    assert response.status_code == 400
    assert "limit is 3" in response.get_body().decode()


def test_get_unknown_and_invalid_ids(jobs_env: JobSettings) -> None:
    assert get("nope").status_code == 404
    assert get("..").status_code == 400


def test_poisoned_units_are_recorded_failed_and_the_job_still_finishes(
    jobs_env: JobSettings, receiver: CallbackReceiver
) -> None:
    post_job({"job_id": "poisoned", "units": units(3), "callback_url": receiver.url})
    messages = receive_all(jobs_env)
    run_job_unit(messages[0])
    for message in messages[1:]:  # as the host does after maxDequeueCount failures
        fail_job_unit(message)
    [post] = receiver.posts
    assert post.body["status"] == "failed"
    assert post.body["failed_units"] == sorted(
        json.loads(m.get_body())["unit_id"] for m in messages[1:]
    )


def test_a_message_that_is_not_a_unit_goes_to_the_poison_queue(jobs_env: JobSettings) -> None:
    run_job_unit(func.QueueMessage(id="m1", body=b'{"job_id": "../x"}'))
    [poisoned] = receive_all(jobs_env, jobs_env.poison_queue)
    fail_job_unit(poisoned)  # not a unit there either: kept aside for a human
    assert len(receive_all(jobs_env, jobs_env.poison_queue + "-poison")) == 1


def test_a_handler_failing_for_good_marks_the_unit_failed_at_once(
    jobs_env: JobSettings, receiver: CallbackReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOB_UNIT_HANDLER", "tests.jobs.handlers:reject_odd")
    post_job({"job_id": "odd", "units": units(4), "callback_url": receiver.url})
    run_units(jobs_env)
    [post] = receiver.posts
    assert post.body["failed_units"] == ["u00001", "u00003"]


def test_a_handler_raising_anything_else_fails_the_invocation_for_a_retry(
    jobs_env: JobSettings, receiver: CallbackReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOB_UNIT_HANDLER", "tests.jobs.handlers:flaky")
    post_job({"job_id": "flaky", "units": units(1), "callback_url": receiver.url})
    [message] = receive_all(jobs_env)
    with pytest.raises(RuntimeError):
        run_job_unit(message)
    assert receiver.posts == []


def firing(back: int) -> TimerRequest:
    """The watcher's timer firing the occurrence `back` occurrences before the latest due."""
    moment = previous_occurrence("*/30 * * * * *", datetime.now(UTC)) - timedelta(seconds=30 * back)
    timer: TimerRequest = catch_up_timer(moment, past_due=False)
    return timer


def test_the_watcher_timer_finishes_a_job_whose_counter_lags(
    jobs_env: JobSettings, receiver: CallbackReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    post_job({"job_id": "lag", "units": units(2), "callback_url": receiver.url})
    store = JobStore(jobs_env)
    store.mark("lag", "u00000", UnitState.DONE)  # its worker died before counting it
    record_unit(store, "lag", "u00001", 2)
    # The stall window set around each sweep rather than slept through (a sweep under load
    # took longer than the suite's 1 s window, so the first sweep found the counter stalled).
    monkeypatch.setenv("JOB_STALL_SECONDS", "3600")
    watch_jobs(firing(1))
    assert run_announcements(jobs_env) == 0  # the counter moved less than JOB_STALL_SECONDS ago
    monkeypatch.setenv("JOB_STALL_SECONDS", "0")  # now it has not moved for the whole window
    watch_jobs(firing(0))  # the next occurrence (one occurrence sweeps once)
    assert receiver.posts == []  # the sweep queues the announcement, never POSTs itself
    assert run_announcements(jobs_env) == 1
    [post] = receiver.posts
    assert post.body["units_done"] == 2
    assert body_of(get("lag"))["archived"] is True


def test_only_the_status_code_of_a_refusal_is_stored_and_shown(jobs_env: JobSettings) -> None:
    """The receiver's answer body (an internal service's error page, say) goes nowhere."""
    with CallbackReceiver(statuses=[404]) as refusing:
        post_job({"job_id": "refused", "units": units(1), "callback_url": refusing.url})
        run_units(jobs_env)
    shown = body_of(get("refused"))
    assert shown["announcement"]["http_status"] == 404
    assert shown["announcement"]["reason"] == "HTTP 404"
    assert "test" not in json.dumps(shown)  # the receiver answered {"error": "test"}
    archived = JobStore(jobs_env).read_archive("refused")
    assert archived is not None and "test" not in json.dumps(archived)


def test_a_body_recorded_by_an_older_version_is_not_shown(jobs_env: JobSettings) -> None:
    from shared.jobs.records import Announcement, AnnouncementState
    from shared.jobs.status import announcement_view

    old = Announcement(AnnouncementState.REFUSED, 1, 0.0, 403, "HTTP 403: <html>intranet</html>")
    assert announcement_view(old) == {
        "state": "refused", "attempts": 1, "at": 0.0, "http_status": 403, "reason": "HTTP 403"
    }  # fmt: skip
