"""Counting units and finishing jobs against a real Azurite: cost, idempotency, outcome."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from azure.storage.blob import BlobServiceClient

from devhost.request_counting import RequestCounter
from harness.callbacks import CallbackReceiver
from shared.jobs import (
    JobSettings,
    JobStore,
    Recorded,
    UnitMessage,
    UnitState,
    finalize,
    job_status,
    process_unit,
    record_unit,
)
from shared.jobs.handlers import echo
from shared.jobs.layout import JobLayout
from tests.jobs.conftest import receive_all, run_announcements, submit, units
from tests.support import LosesAnswers, blob_service_over


def test_counting_a_unit_costs_two_requests_and_a_duplicate_one(
    jobs_env: JobSettings, receiver: CallbackReceiver
) -> None:
    counter = RequestCounter()  # the store's own: another test's lease renewals not counted
    service = BlobServiceClient.from_connection_string(
        os.environ["AzureWebJobsStorage"], raw_request_hook=counter
    )
    store = JobStore(jobs_env, container=service.get_container_client(jobs_env.container))
    submit(jobs_env, receiver.url, units(3), "cost")
    counter.reset()
    first = record_unit(store, "cost", "u00000", 3)
    assert (first.outcome, first.count, counter.total()) == (Recorded.COUNTED, 1, 2)
    assert counter.by_method() == {"PUT": 2}
    counter.reset()
    again = record_unit(store, "cost", "u00000", 3)
    assert (again.outcome, counter.total()) == (Recorded.DUPLICATE, 1)
    assert store.counter_state("cost").value == 1  # type: ignore[union-attr]


def test_the_last_unit_announces_once_and_archives(
    jobs_env: JobSettings, receiver: CallbackReceiver
) -> None:
    store = JobStore(jobs_env)
    submit(jobs_env, receiver.url, units(4), "job-a")
    results = [record_unit(store, "job-a", f"u{i:05d}", 4) for i in range(4)]
    assert [r.count for r in results] == [1, 2, 3, 4]
    assert [r.completion is not None for r in results] == [False, False, False, True]
    [post] = receiver.posts
    assert post.idempotency_key == "job-a"
    assert post.body == {
        "job_id": "job-a",
        "status": "succeeded",
        "units_done": 4,
        "units_failed": 0,
        "failed_units": [],
    }
    assert store.names(JobLayout("job-a").prefix) == []
    status = job_status(store, "job-a")
    assert status is not None
    assert (status["status"], status["archived"], status["units_done"]) == ("succeeded", True, 4)
    assert status["announcement"]["state"] == "delivered"


def test_failed_units_make_a_failed_job_that_lists_them(
    jobs_env: JobSettings, receiver: CallbackReceiver
) -> None:
    store = JobStore(jobs_env)
    submit(jobs_env, receiver.url, units(3), "job-f")
    record_unit(store, "job-f", "u00001", 3, UnitState.FAILED, "bad input")
    record_unit(store, "job-f", "u00000", 3)
    record_unit(store, "job-f", "u00002", 3, UnitState.FAILED, "also bad")
    [post] = receiver.posts
    assert post.body["status"] == "failed"
    assert (post.body["units_done"], post.body["failed_units"]) == (1, ["u00001", "u00002"])


def test_a_late_duplicate_after_the_archive_is_ignored_and_leaves_nothing(
    jobs_env: JobSettings, receiver: CallbackReceiver
) -> None:
    store = JobStore(jobs_env)
    submit(jobs_env, receiver.url, units(1), "late")
    assert record_unit(store, "late", "u00000", 1).completion is not None
    assert record_unit(store, "late", "u00000", 1).outcome == Recorded.JOB_GONE
    assert store.names(JobLayout("late").prefix) == []
    assert len(receiver.posts) == 1


def test_a_job_of_zero_units_completes_at_once(
    jobs_env: JobSettings, receiver: CallbackReceiver
) -> None:
    submitted = submit(jobs_env, receiver.url, [], "empty")
    assert submitted.completion is not None
    assert submitted.completion.status == "succeeded"
    assert receive_all(jobs_env) == []
    assert receiver.posts == []  # announced from the announce queue, not by the submitter
    assert run_announcements(jobs_env) == 1
    [post] = receiver.posts
    assert post.body["units_done"] == 0


def test_a_large_payload_travels_by_reference(
    jobs_env: JobSettings, receiver: CallbackReceiver
) -> None:
    big = {"blob": "x" * 100_000}
    submit(jobs_env, receiver.url, [{"id": "big", "payload": big}, {"id": "small"}], "large")
    seen: dict[str, object] = {}
    store = JobStore(jobs_env)
    for message in receive_all(jobs_env):
        assert len(message.get_body()) < 48 * 1024
        unit = UnitMessage.parse(message.get_body())
        process_unit(unit, lambda u: seen.__setitem__(u.unit_id, u.payload), store)
    assert seen == {"big": big, "small": None}
    assert len(receiver.posts) == 1


def test_odd_ids_stay_inside_their_job(jobs_env: JobSettings, receiver: CallbackReceiver) -> None:
    store = JobStore(jobs_env)
    odd = ["a/b", "%2F", "ünï cødé", "x..y", "UPPER"]
    submit(jobs_env, receiver.url, [{"id": u} for u in odd], "odd/job %")
    for message in receive_all(jobs_env):
        process_unit(UnitMessage.parse(message.get_body()), echo, store)
    [post] = receiver.posts
    assert post.body["job_id"] == "odd/job %"
    assert post.body["units_done"] == 5


def test_status_of_a_running_job_counts_outstanding_units(
    jobs_env: JobSettings, receiver: CallbackReceiver
) -> None:
    store = JobStore(jobs_env)
    submit(jobs_env, receiver.url, units(5), "progress")
    record_unit(store, "progress", "u00000", 5)
    record_unit(store, "progress", "u00003", 5, UnitState.FAILED, "nope")
    status = job_status(store, "progress")
    assert status is not None
    keys = ("status", "units_done", "units_failed", "units_outstanding")
    assert {k: status[k] for k in keys} == {
        "status": "running",
        "units_done": 1,
        "units_failed": 1,
        "units_outstanding": 3,
    }
    assert status["failed_units"] == ["u00003"]
    assert json.dumps(status)


def test_a_finalizer_arriving_after_the_archive_posts_nothing_and_leaves_nothing(
    jobs_env: JobSettings, receiver: CallbackReceiver
) -> None:
    """The watcher decided to finalize, then the counter's winner archived the job first."""
    store = JobStore(jobs_env)
    submit(jobs_env, receiver.url, units(1), "raced")
    done = record_unit(store, "raced", "u00000", 1).completion
    assert done is not None
    stale = done.with_(announcement=None, etag=None, finalized_by="watcher")
    again = finalize(store, stale)
    assert again is not None and again.announcement == done.announcement
    assert len(receiver.posts) == 1
    assert store.names(JobLayout("raced").prefix) == []
    archived = store.read_archive("raced")
    assert archived is not None and archived["completion"]["finalized_by"] == "counter"


def lossy_job(
    settings: JobSettings, receiver: CallbackReceiver, job_id: str, count: int
) -> tuple[JobStore, LosesAnswers]:
    """A job of `count` units, and a store whose requests go through a `LosesAnswers`."""
    transport = LosesAnswers()
    container = blob_service_over(transport).get_container_client(settings.container)
    submit(settings, receiver.url, units(count), job_id)
    return JobStore(settings, container=container), transport


def _increments(request: Any) -> bool:
    return "x-ms-sequence-number-action" in request.headers


def _markers(request: Any) -> bool:
    return request.method == "PUT" and "/units/" in request.url


def test_a_count_whose_answer_was_lost_is_not_counted_twice(
    jobs_env: JobSettings, receiver: CallbackReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    store, transport = lossy_job(jobs_env, receiver, "lost-count", 3)
    transport.arm(_increments)
    first = record_unit(store, "lost-count", "u00000", 3)  # landed; its answer lost
    assert transport.lost == 1
    assert (first.outcome, first.count) == (Recorded.COUNTED, 1)  # read back, not sent again
    assert "counter increment's answer was lost; the counter reads 1 of 3" in caplog.text
    second = record_unit(store, "lost-count", "u00001", 3)
    assert (second.count, second.completion, receiver.posts) == (2, None, [])  # not announced
    third = record_unit(store, "lost-count", "u00002", 3)
    assert third.count == 3 and third.completion is not None
    [post] = receiver.posts
    assert post.body["units_done"] == 3


def test_a_last_count_whose_answer_was_lost_still_announces_once(
    jobs_env: JobSettings, receiver: CallbackReceiver
) -> None:
    store, transport = lossy_job(jobs_env, receiver, "lost-last", 2)
    record_unit(store, "lost-last", "u00000", 2)
    transport.arm(_increments)
    last = record_unit(store, "lost-last", "u00001", 2)  # made it 2 of 2; its answer lost
    assert transport.lost == 1 and last.count == 2 and last.completion is not None
    [post] = receiver.posts
    assert post.body["units_done"] == 2


def test_a_marker_whose_answer_was_lost_is_ours_and_the_unit_is_counted(
    jobs_env: JobSettings, receiver: CallbackReceiver
) -> None:
    store, transport = lossy_job(jobs_env, receiver, "lost-mark", 2)
    transport.arm(_markers)
    first = record_unit(store, "lost-mark", "u00000", 2)  # the SDK's copy met BlobAlreadyExists
    assert transport.lost == 1
    assert (first.outcome, first.count) == (Recorded.COUNTED, 1)
    assert record_unit(store, "lost-mark", "u00000", 2).outcome == Recorded.DUPLICATE
    assert record_unit(store, "lost-mark", "u00001", 2).completion is not None
