"""The watcher's other duties: an unreachable callback, stray blobs, a stalled submission."""

from __future__ import annotations

import socket

import pytest

from harness.callbacks import CallbackReceiver
from shared.jobs import JobSettings, JobStore, job_status, record_unit, watch
from shared.jobs.layout import JobLayout
from tests.jobs.conftest import run_announcements, submit, units


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/cb"


def test_an_unreachable_callback_is_retried_then_abandoned_and_the_job_archived(
    jobs_env: JobSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stall and give-up windows are set around each step rather than slept through (under
    # load a step took longer than the suite's 1 s stall window).
    def settings(stall: str, give_up_hours: str) -> JobStore:
        monkeypatch.setenv("JOB_STALL_SECONDS", stall)
        monkeypatch.setenv("JOB_CALLBACK_GIVE_UP_HOURS", give_up_hours)
        return JobStore(JobSettings.from_env())

    store = settings("3600", "1")
    submit(jobs_env, closed_port_url(), units(1), "unreachable")
    assert record_unit(store, "unreachable", "u00000", 1).completion is None  # not announced
    assert watch(store) == {"finalizing": 1}  # the finalizer might still be at it
    store = settings("0", "1")  # the finalizer has had its window
    assert watch(store) == {"announcing": 1}  # queued again
    assert run_announcements(jobs_env) == 1  # retried, still unreachable
    assert watch(store) == {"announcing": 1}
    store = settings("0", "0")  # past JOB_CALLBACK_GIVE_UP_HOURS
    assert run_announcements(jobs_env) == 1  # abandoned
    assert watch(store) == {}
    status = job_status(store, "unreachable")
    assert status is not None and status["archived"]
    assert status["announcement"]["state"] == "abandoned"


def test_stray_blobs_under_a_finished_job_are_removed(
    jobs_env: JobSettings, receiver: CallbackReceiver
) -> None:
    store = JobStore(jobs_env)
    submit(jobs_env, receiver.url, units(1), "tidy")
    record_unit(store, "tidy", "u00000", 1)
    store.index_failed("tidy", "u00000", "written by a worker that lost a race")  # stray
    assert watch(store) == {"stray-removed": 1}
    assert store.names(JobLayout("tidy").prefix) == []
    assert watch(store) == {}


def test_a_job_still_being_submitted_is_left_alone(
    jobs_env: JobSettings, receiver: CallbackReceiver
) -> None:
    store = JobStore(jobs_env)
    submit(jobs_env, receiver.url, units(2), "slow-submit")
    store.delete(JobLayout("slow-submit").counter)  # as if submission died before the counter
    assert watch(store) == {"accepting": 1}
    assert receiver.posts == []
