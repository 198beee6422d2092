"""The callback POST against a real local HTTP receiver: retries, refusals, wall-clock
deadlines per attempt and per announcement, and nothing of the answer kept but its status."""

from __future__ import annotations

import socket
import time

import pytest

from harness.callbacks import CallbackReceiver
from shared.jobs import CallbackUnavailable, Completion, JobSettings, JobStatus
from shared.jobs.callback import post_callback
from shared.jobs.callback_url import CallbackPolicy, parse_networks
from shared.jobs.records import AnnouncementState

LOCAL = CallbackPolicy(parse_networks("127.0.0.0/8", "test"), allow_http=True)
SETTINGS = JobSettings(callback_timeout=1.0, callback_attempts=3, callback_policy=LOCAL)
#: What bounds a deadline test from above: ten times the deadline it holds to. A busy machine
#: makes a call slower, never a cut earlier, so lower bounds stay as they are; an upper bound
#: only tells a deadline from none (a held answer never ends, a dribbled one takes 50 minutes).
OVER = 10


def completion(url: str, job_id: str = "job-1") -> Completion:
    return Completion(
        job_id=job_id,
        status=JobStatus.FAILED,
        units_done=2,
        units_failed=1,
        failed_units=["u3"],
        callback_url=url,
        completed_at=time.time(),
        last_unit_at=time.time(),
        finalized_by="counter",
    )


def no_sleep(seconds: float) -> None:
    assert 0 <= seconds <= 8


def test_delivered_with_idempotency_key_and_the_documented_body() -> None:
    with CallbackReceiver() as receiver:
        result = post_callback(completion(receiver.url), SETTINGS, sleep=no_sleep)
    assert (result.state, result.http_status, result.attempts) == (
        AnnouncementState.DELIVERED,
        200,
        1,
    )
    [post] = receiver.posts
    assert post.idempotency_key == "job-1"
    assert post.body == {
        "job_id": "job-1",
        "status": "failed",
        "units_done": 2,
        "units_failed": 1,
        "failed_units": ["u3"],
    }


def test_server_errors_are_retried_with_the_same_key() -> None:
    with CallbackReceiver(statuses=[500, 503]) as receiver:
        result = post_callback(completion(receiver.url), SETTINGS, sleep=no_sleep)
    assert (result.state, result.attempts) == (AnnouncementState.DELIVERED, 3)
    assert [p.idempotency_key for p in receiver.posts] == ["job-1"] * 3


@pytest.mark.parametrize("status", [400, 404, 410, 302])
def test_client_errors_and_redirects_are_refusals_not_retried(status: int) -> None:
    with CallbackReceiver(statuses=[status]) as receiver:
        result = post_callback(completion(receiver.url), SETTINGS, sleep=no_sleep)
    assert (result.state, result.http_status, result.attempts) == (
        AnnouncementState.REFUSED,
        status,
        1,
    )
    assert str(status) in (result.reason or "")
    assert "error" not in (result.reason or "")  # the receiver's body is never kept
    assert len(receiver.posts) == 1


def test_too_many_requests_is_retried() -> None:
    with CallbackReceiver(statuses=[429]) as receiver:
        result = post_callback(completion(receiver.url), SETTINGS, sleep=no_sleep)
    assert result.state == AnnouncementState.DELIVERED
    assert len(receiver.posts) == 2


def test_connection_refused_every_time_raises_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nobody listens there
    with pytest.raises(CallbackUnavailable) as caught:
        post_callback(completion(f"http://127.0.0.1:{port}/cb"), SETTINGS, sleep=no_sleep)
    assert caught.value.attempts == 3
    assert caught.value.reason == "connection failed (ConnectionRefusedError)"


def test_a_receiver_that_does_not_answer_times_out_and_is_retried() -> None:
    with CallbackReceiver() as receiver, receiver.hold():
        started = time.monotonic()
        with pytest.raises(CallbackUnavailable, match="no answer within 1 s"):
            post_callback(completion(receiver.url), SETTINGS, sleep=no_sleep)
        assert time.monotonic() - started < OVER * 3 * SETTINGS.callback_timeout
        assert len(receiver.posts) == 3


def test_a_receiver_dribbling_its_answer_is_cut_at_the_attempt_deadline() -> None:
    """One byte every 0.3 s never lets a socket operation time out; the wall clock does. The
    10,000 bytes would take 50 minutes; the attempt ends at its 1.5 s, not before."""
    settings = JobSettings(callback_timeout=1.5, callback_attempts=1, callback_policy=LOCAL)
    with CallbackReceiver() as receiver, receiver.dribble(0.3):
        started = time.monotonic()
        with pytest.raises(CallbackUnavailable, match=r"no answer within 1\.5 s"):
            post_callback(completion(receiver.url), settings, sleep=no_sleep)
        took = time.monotonic() - started
        assert receiver.answered.wait(5)  # the receiver saw the connection go
    assert 1.4 < took < OVER * settings.callback_timeout


def test_every_attempt_and_wait_end_within_the_announcement_deadline() -> None:
    """Each dribbled attempt is cut at its 1 s, so ten would take ten seconds: the 2.5 s
    deadline leaves room for three at most (fewer when a busy machine slows them)."""
    settings = JobSettings(
        callback_timeout=1.0, callback_attempts=10, callback_deadline=2.5, callback_policy=LOCAL
    )
    waits: list[float] = []
    with (
        CallbackReceiver() as receiver,
        receiver.dribble(0.2),
        pytest.raises(CallbackUnavailable, match="deadline") as caught,
    ):
        post_callback(completion(receiver.url), settings, sleep=waits.append)
    assert 1 <= caught.value.attempts <= 3
    assert 1 <= len(receiver.posts) <= 3


def test_a_loopback_receiver_is_refused_without_the_allow_list() -> None:
    with CallbackReceiver() as receiver:
        result = post_callback(
            completion(receiver.url), JobSettings(callback_policy=CallbackPolicy(allow_http=True))
        )
    assert result.state == AnnouncementState.REFUSED
    assert "loopback" in (result.reason or "")
    assert receiver.posts == []


def test_a_callback_url_now_pointing_at_metadata_is_refused_without_a_request() -> None:
    result = post_callback(
        completion("https://169.254.169.254/latest/meta-data/"), SETTINGS, sleep=no_sleep
    )
    assert result.state == AnnouncementState.REFUSED
    assert "link-local" in (result.reason or "")
