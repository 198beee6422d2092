"""Real processes racing for leases on a real Azurite."""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from blobsingleton import BlobLease, LeaseTimeout
from blobsingleton.leases import read_lock

HOLDER = str(Path(__file__).with_name("lease_holder.py"))


def _spawn(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, HOLDER, *args], env=env, stdout=subprocess.PIPE, text=True
    )


def test_eight_processes_never_overlap_and_tokens_follow_order(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "runs.txt"
    procs = [_spawn(subprocess_env, "race-key", "race", str(out), "0.3") for _ in range(8)]
    for proc in procs:
        assert proc.wait(120) == 0
    runs = sorted(
        (float(start), float(end), int(token))
        for token, start, end in (line.split() for line in out.read_text().splitlines())
    )
    assert len(runs) == 8
    for (_, end, token), (start, _, next_token) in itertools.pairwise(runs):
        assert end <= start, "two holders held the lease at the same time"
        assert next_token > token, "fencing token did not increase with acquisition order"


def test_sigterm_releases_so_a_waiter_takes_over_at_once(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    proc = _spawn(subprocess_env, "term-key", "hold", str(tmp_path / "x"))
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("acquired")
    proc.send_signal(signal.SIGTERM)
    proc.wait(20)
    # Released before it exited: storage says "available" (an expired lease says "expired",
    # a held one "leased"), and a waiter takes the key at its first try.
    state = read_lock("term-key")
    assert state is not None and (state.leased, state.lease_state) == (False, "available")
    BlobLease("term-key").acquire(blocking=False).release()


def test_killed_holder_blocks_only_until_expiry(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    proc = _spawn(subprocess_env, "kill-key", "hold", str(tmp_path / "x"))
    assert proc.stdout is not None and proc.stdout.readline().startswith("acquired")
    proc.kill()
    proc.wait()
    # Never released: storage still has it leased after the kill, and a waiter has it once its
    # 15 s expire (asking for ten periods: a slow machine is no failure).
    lease = BlobLease("kill-key", poll_interval=1.0)
    with pytest.raises(LeaseTimeout):
        lease.acquire(blocking=False)
    state = read_lock("kill-key")
    assert state is not None and state.leased  # still the killed holder's
    lease.acquire(timeout=10 * 15.0).release()


@pytest.mark.slow
def test_paused_holder_learns_it_lost_the_lease(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    proc = _spawn(subprocess_env, "pause-key", "pause", str(tmp_path / "x"), "1")
    assert proc.stdout is not None and proc.stdout.readline().startswith("acquired")
    proc.send_signal(signal.SIGSTOP)
    newer = BlobLease("pause-key", poll_interval=1.0).acquire(timeout=10 * 15.0)
    try:
        proc.send_signal(signal.SIGCONT)
        verdict = proc.stdout.readline()
        assert newer.is_held
    finally:
        newer.release()
    proc.wait(20)
    assert verdict.startswith("lost"), verdict
