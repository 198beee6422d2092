"""Counting units when storage answers as Azure does under load (`server_errors`: a proxy in
front of Azurite answering chosen requests 503 ServerBusy unforwarded, or 500
OperationTimedOut / InternalError after they landed).

The counter's increment is not idempotent: sent again only after a 503 (it did not land), read
instead after a 500 (it may have), never counted twice. A unit's marker answered 500 after it
landed is known as ours by its write id.
"""

from __future__ import annotations

import pytest

from harness.callbacks import CallbackReceiver
from harness.http_messages import Message
from shared.jobs import JobSettings, JobStore, Recorded, record_unit
from tests.conftest import ServerErrors
from tests.jobs.conftest import submit, units


def _increments(request: Message) -> bool:
    return request.header("x-ms-sequence-number-action") == "increment"


def _markers(request: Message) -> bool:
    return request.method == "PUT" and "/units/" in request.target


def _job(settings: JobSettings, receiver: CallbackReceiver, job_id: str, count: int) -> JobStore:
    submit(settings, receiver.url, units(count), job_id)
    return JobStore(settings)  # its client through the proxies (AzureWebJobsStorage)


def test_an_increment_answered_503_is_sent_again_and_counted_once(
    server_errors: ServerErrors, jobs_env: JobSettings, receiver: CallbackReceiver
) -> None:
    store = _job(jobs_env, receiver, "busy-count", 2)
    server_errors.blob.arm("server_busy", _increments)
    first = record_unit(store, "busy-count", "u00000", 2)
    assert server_errors.blob.armed() == 0
    assert (first.outcome, first.count) == (Recorded.COUNTED, 1)
    last = record_unit(store, "busy-count", "u00001", 2)
    assert last.count == 2 and last.completion is not None
    assert len(receiver.posts) == 1


@pytest.mark.parametrize("kind", ["operation_timed_out", "internal_error"])
def test_an_increment_answered_500_after_it_landed_is_read_not_sent_twice(
    server_errors: ServerErrors,
    jobs_env: JobSettings,
    receiver: CallbackReceiver,
    caplog: pytest.LogCaptureFixture,
    kind: str,
) -> None:
    store = _job(jobs_env, receiver, f"late-{kind[:4]}", 3)
    job_id = f"late-{kind[:4]}"
    server_errors.blob.arm(kind, _increments)
    first = record_unit(store, job_id, "u00000", 3)
    assert (first.outcome, first.count) == (Recorded.COUNTED, 1)  # read back: 1, not 2
    assert "the counter reads 1 of 3" in caplog.text
    assert record_unit(store, job_id, "u00001", 3).completion is None  # not announced early
    assert record_unit(store, job_id, "u00002", 3).completion is not None
    [post] = receiver.posts
    assert post.body["units_done"] == 3


@pytest.mark.parametrize("kind", ["operation_timed_out", "internal_error"])
def test_a_marker_answered_500_after_it_landed_is_ours_and_the_unit_counted(
    server_errors: ServerErrors, jobs_env: JobSettings, receiver: CallbackReceiver, kind: str
) -> None:
    job_id = f"mark-{kind[:4]}"
    store = _job(jobs_env, receiver, job_id, 2)
    server_errors.blob.arm(kind, _markers)
    first = record_unit(store, job_id, "u00000", 2)  # the SDK's copy met BlobAlreadyExists
    assert server_errors.blob.armed() == 0
    assert (first.outcome, first.count) == (Recorded.COUNTED, 1)
    assert record_unit(store, job_id, "u00000", 2).outcome == Recorded.DUPLICATE
    assert record_unit(store, job_id, "u00001", 2).completion is not None
