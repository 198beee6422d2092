"""Eight real worker processes finishing the same job's units at the same time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.callbacks import CallbackReceiver
from shared.jobs import JobSettings, JobStore
from tests.jobs.conftest import submit, units

DRIVER = str(Path(__file__).with_name("driver.py"))


def test_eight_workers_on_one_job_post_exactly_one_callback(
    jobs_env: JobSettings, jobs_process_env: dict[str, str], receiver: CallbackReceiver
) -> None:
    submit(jobs_env, receiver.url, units(400), "race")
    procs = [subprocess.Popen([sys.executable, DRIVER], env=jobs_process_env) for _ in range(8)]
    assert [p.wait(300) for p in procs] == [0] * 8
    assert receiver.wait_for(lambda posts: len(posts) >= 1, timeout=30)
    [post] = receiver.posts
    assert (post.idempotency_key, post.body["units_done"]) == ("race", 400)
    archived = JobStore(jobs_env).read_archive("race")
    assert archived is not None
    assert archived["completion"]["finalized_by"] == "counter"


def test_the_last_units_finishing_together_still_finalize_once(
    jobs_env: JobSettings,
    jobs_process_env: dict[str, str],
    receiver: CallbackReceiver,
    tmp_path: Path,
) -> None:
    """Eight units on eight workers, one each, all finishing at once (each waits at a barrier
    for the other seven): exactly one of the increments sees n == total."""
    submit(jobs_env, receiver.url, units(8), "photo-finish")
    env = {**jobs_process_env, "JOB_UNIT_HANDLER": "tests.jobs.handlers:together"}
    env.update(DRIVER_BATCH="1", TEST_UNIT_BARRIER=str(tmp_path), TEST_UNIT_PARTIES="8")
    procs = [
        subprocess.Popen([sys.executable, DRIVER], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(8)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * 8
    counted = [
        float(line.split()[2])
        for out in outputs
        for line in out.splitlines()
        if line.startswith("step counted ")
    ]
    assert len(counted) == 8
    # Together by events, not by a wall-clock spread: no unit was counted before all eight
    # had reached the barrier (a file's time is the kernel's coarse clock: never later).
    reached = max(path.stat().st_mtime for path in tmp_path.iterdir())
    assert min(counted) >= reached, "a unit was counted before every unit reached the barrier"
    # The drivers announce inline, and the receiver records a POST before answering it: with
    # every driver exited, every callback they sent is in `posts` (no wait for a second one).
    announced = [out for out in outputs for line in out.splitlines() if "step announced" in line]
    assert len(announced) == 1
    assert [p.idempotency_key for p in receiver.posts] == ["photo-finish"]
    markers = JobStore(jobs_env).read_archive("photo-finish")
    assert markers is not None and markers["completion"]["units_done"] == 8
