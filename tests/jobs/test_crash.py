"""Real worker processes SIGKILLed at each step of a unit's life and of the job's end: the
job still finishes and the receiver gets exactly one callback, or, inside the documented
window (a crash during the POST), a repeat carrying the same Idempotency-Key."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.callbacks import CallbackPost, CallbackReceiver
from shared.jobs import JobSettings, JobStore, watch
from tests.jobs.conftest import run_announcements, submit, units
from tests.support import AppSettings

DRIVER = str(Path(__file__).with_name("driver.py"))
UNITS = 5


def driver(env: dict[str, str], crash_at: str = "") -> subprocess.Popen[str]:
    args = [sys.executable, DRIVER] + ([crash_at] if crash_at else [])
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, text=True)


def steps_of(proc: subprocess.Popen[str], timeout: float = 120) -> list[str]:
    out, _ = proc.communicate(timeout=timeout)
    return [line.split()[1] for line in out.splitlines() if line.startswith("step ")]


def watch_until_archived(settings: JobSettings, job_id: str, timeout: float) -> dict[str, int]:
    """Run the watcher, as its timer would, and the announcements it queues, as the announce
    queue's function would, until the job is archived."""
    store = JobStore(settings)
    deadline = time.monotonic() + timeout
    seen: dict[str, int] = {}
    while time.monotonic() < deadline:
        for state, count in watch(store).items():
            seen[state] = seen.get(state, 0) + count
        run_announcements(settings)
        if store.read_job(job_id) is None and store.archive_exists(job_id):
            return seen
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} not archived after {timeout:.0f} s: {seen}")


def finished_by(settings: JobSettings, job_id: str) -> str:
    archived = JobStore(settings).read_archive(job_id)
    assert archived is not None
    assert archived["completion"]["announcement"]["state"] == "delivered"
    return str(archived["completion"]["finalized_by"])


def assert_one_callback(posts: list[CallbackPost], job_id: str) -> None:
    assert [p.idempotency_key for p in posts] == [job_id]
    assert posts[0].body == {
        "job_id": job_id,
        "status": "succeeded",
        "units_done": UNITS,
        "units_failed": 0,
        "failed_units": [],
    }


@pytest.mark.parametrize(
    ("crash_at", "finisher"),
    [
        ("worked:1", "counter"),  # unit done, not marked: redelivered, done again, counted
        ("marked:1", "watcher"),  # marked, not counted: the redelivery is a duplicate; lag
        (f"counted:{UNITS}", "watcher"),  # last unit counted, nothing finalized
        ("completion-recorded:1", "counter"),  # outcome stored, no callback yet
        ("announced:1", "counter"),  # callback delivered, not recorded
        ("announcement-recorded:1", "counter"),  # recorded, not archived
        ("archive-written:1", "counter"),  # archived, live blobs not deleted
    ],
)
def test_a_worker_killed_at_each_step_still_ends_the_job_with_one_callback(
    jobs_env: JobSettings,
    jobs_process_env: dict[str, str],
    receiver: CallbackReceiver,
    crash_at: str,
    finisher: str,
) -> None:
    job_id = f"crash-{crash_at.replace(':', '-')}"
    submit(jobs_env, receiver.url, units(UNITS), job_id)
    # A unit takes milliseconds: its message may come back 1 s after the crash, not 3.
    env = {**jobs_process_env, "DRIVER_VISIBILITY": "1"}
    crashed = driver(env, crash_at)
    steps = steps_of(crashed)
    assert crashed.returncode == -signal.SIGKILL
    assert steps[-1] == crash_at.split(":")[0]
    assert steps_of(driver(env)) is not None  # a restarted worker takes over
    watch_until_archived(jobs_env, job_id, timeout=60)
    assert_one_callback(receiver.posts, job_id)
    assert finished_by(jobs_env, job_id) == finisher


def test_a_worker_killed_during_the_callback_is_repeated_once_with_the_same_key(
    jobs_env: JobSettings,
    jobs_process_env: dict[str, str],
    receiver: CallbackReceiver,
    app_settings: AppSettings,
) -> None:
    """The documented at-least-once window: the POST arrived, its sender died before
    knowing. Once the announcement's in-progress record expires the watcher posts again."""
    # One attempt per announcement: its in-progress record lasts 12 s rather than 22 s.
    app_settings.set({"JOB_CALLBACK_ATTEMPTS": "1"})
    jobs_env = JobSettings.from_env()
    env = {**jobs_process_env, "JOB_CALLBACK_ATTEMPTS": "1"}
    submit(jobs_env, receiver.url, units(UNITS), "crash-in-post")
    with receiver.hold():
        proc = driver(env)
        assert receiver.arrived.wait(60), "the callback never arrived"
        proc.kill()
        proc.communicate(timeout=30)
    killed_at = time.monotonic()
    watch_until_archived(jobs_env, "crash-in-post", timeout=90)
    waited = time.monotonic() - killed_at
    posts = receiver.posts
    assert [p.idempotency_key for p in posts] == ["crash-in-post", "crash-in-post"]
    assert posts[0].body == posts[1].body
    assert waited >= jobs_env.announce_in_progress_timeout - 5  # not before the record expired
