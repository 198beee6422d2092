"""Eight real worker processes finishing the same job's units at the same time."""

from __future__ import annotations

import subprocess
import sys
import time
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
    """Eight units on eight workers, one each, all finishing at the same wall-clock instant:
    the increments land within about 0.1 s and exactly one of them sees n == total."""
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
    assert max(counted) - min(counted) < 0.5, "the units did not finish together"
    assert receiver.wait_for(lambda posts: len(posts) >= 1, timeout=30)
    time.sleep(1)  # a second callback, if any, would have arrived by now
    assert [p.idempotency_key for p in receiver.posts] == ["photo-finish"]
    markers = JobStore(jobs_env).read_archive("photo-finish")
    assert markers is not None and markers["completion"]["units_done"] == 8
