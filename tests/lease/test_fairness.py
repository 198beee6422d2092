"""Fair waiting (`BlobLease(fair=True)`, what `@singleton(on_busy=Busy.WAIT)` uses).

Real processes contend for one key on Azurite, each releasing and asking again at once. With
plain polling the releaser wins almost every time and others starve; in line, each waiter
gets its turn, and mutual exclusion and fencing are exactly as before.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from blobsingleton import BlobLease, LeaseTimeout

ROOT = Path(__file__).resolve().parents[2]


def run_contenders(
    env: dict[str, str], out: Path, processes: int, seconds: float
) -> list[list[str]]:
    key = f"fair-{uuid.uuid4().hex[:8]}"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.contender", key, str(out), str(seconds), "0.05", "1"],
            env=env,
            cwd=ROOT,
        )
        for _ in range(processes)
    ]
    for proc in procs:
        assert proc.wait(seconds + 90) == 0
    return [line.split() for line in out.read_text().splitlines() if line[0].isdigit()]


def test_contending_processes_take_turns_in_line(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "acquisitions.txt"
    rows = run_contenders(subprocess_env, out, processes=4, seconds=12)
    by_start = sorted(rows, key=lambda r: float(r[1]))
    tokens = [int(r[0]) for r in by_start]
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)  # fencing unchanged
    for earlier, later in itertools.pairwise(by_start):
        assert float(earlier[2]) <= float(later[1]), "two holders at once"
    per_process = Counter(r[4] for r in rows)
    assert len(per_process) == 4, f"a process never got the key: {per_process}"
    most, fewest = max(per_process.values()), min(per_process.values())
    assert most <= 2 * fewest, f"not fair: {sorted(per_process.values())}"


def test_a_release_hands_the_lease_to_the_waiter_in_line(storage_env: str) -> None:
    key = f"hand-{uuid.uuid4().hex[:8]}"
    holder = BlobLease(key, fair=True).acquire()
    waiter = BlobLease(key, fair=True)
    got = threading.Event()

    def wait() -> None:
        waiter.acquire(timeout=30)
        got.set()

    thread = threading.Thread(target=wait)
    thread.start()
    deadline = time.monotonic() + 10
    while holder.waiters() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)  # until the waiter stands in line
    first = holder.token
    holder.release()
    # Nobody can barge in, the releaser included: the lease went to the waiter, not to "free".
    with pytest.raises(LeaseTimeout):
        BlobLease(key).acquire(blocking=False)
    assert got.wait(5), "the waiter in line did not get the handed-over lease"
    assert waiter.token > first
    assert waiter.waiters() == 0  # it left the line when it got the key
    waiter.release()
    thread.join()


@pytest.mark.slow
def test_a_dead_waiter_blocks_the_line_for_at_most_one_lease_period(storage_env: str) -> None:
    key = f"dead-{uuid.uuid4().hex[:8]}"
    holder = BlobLease(key, fair=True).acquire()
    dead = BlobLease(key, fair=True)
    dead._stop_waiting = lambda: None  # type: ignore[method-assign]  # dies in line: never leaves
    with pytest.raises(LeaseTimeout):
        dead.acquire(timeout=1.0)
    holder.release()  # hands the lease to the dead waiter
    started = time.monotonic()
    survivor = BlobLease(key, fair=True).acquire(timeout=40)
    waited = time.monotonic() - started
    assert survivor.is_held
    survivor.release()
    assert waited <= 15.0 + 3.0, f"a dead waiter held the line {waited:.1f} s"
