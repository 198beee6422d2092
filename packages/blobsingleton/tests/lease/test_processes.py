"""Real processes racing for leases on a real Azurite."""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from blobsingleton import BlobLease

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
    started = time.monotonic()
    with BlobLease("term-key", poll_interval=0.2):
        waited = time.monotonic() - started
    assert waited < 5, f"waited {waited:.1f} s: the lease was not released on SIGTERM"


def test_killed_holder_blocks_only_until_expiry(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    proc = _spawn(subprocess_env, "kill-key", "hold", str(tmp_path / "x"))
    assert proc.stdout is not None and proc.stdout.readline().startswith("acquired")
    proc.kill()
    proc.wait()
    started = time.monotonic()
    with BlobLease("kill-key", poll_interval=1.0):
        waited = time.monotonic() - started
    assert waited <= 20, "a crashed holder blocked longer than its lease period"


@pytest.mark.slow
def test_paused_holder_learns_it_lost_the_lease(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    proc = _spawn(subprocess_env, "pause-key", "pause", str(tmp_path / "x"), "1")
    assert proc.stdout is not None and proc.stdout.readline().startswith("acquired")
    proc.send_signal(signal.SIGSTOP)
    started = time.monotonic()
    with BlobLease("pause-key", poll_interval=1.0) as newer:
        assert time.monotonic() - started <= 20
        proc.send_signal(signal.SIGCONT)
        verdict = proc.stdout.readline()
        assert newer.is_held
    proc.wait(20)
    assert verdict.startswith("lost"), verdict
