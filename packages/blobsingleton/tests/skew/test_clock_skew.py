"""Instances whose wall clocks disagree by minutes still run the work once, and take over a
crashed holder's key on time: every expiry is judged in storage's time.

Two real processes race on one key against a real Azurite, one of them with `time.time()`
shifted by 120 s either way (monotonic clocks untouched, as on a VM resumed from a pause).
Before expiry moved to storage's time, a record stamped by one clock and judged by another
ran the work twice (caller ahead) or held a crashed run's key two minutes too long (behind).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

CHILD = [str(Path(__file__).resolve().parents[1] / "skew" / "skewed_child.py")]
SKEW = 120.0
#: Short enough that the work outlives several heartbeats, long enough for a loaded machine.
IN_PROGRESS_TIMEOUT = 2.0
#: Storage's times are whole seconds (up to 2 s late), a waiter polls every second, and a
#: loaded 2-core machine starts a Python process in about a second.
TAKEOVER_SLACK = 5.0


class Child:
    """One skewed process; its lines are read as they come (events, not sleeps). Its stdout is
    only ever read through one buffered reader (a `communicate()` after a `readline()` would
    miss the lines that reader had already buffered); stderr goes to a file."""

    def __init__(self, env: dict[str, str], offset: float, kind: str, key: str, work: float):
        self.errors = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed by the fixture)
        self.proc = subprocess.Popen(
            [sys.executable, *CHILD, str(offset), kind, key, str(work), str(IN_PROGRESS_TIMEOUT)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            text=True,
        )
        self.lines: list[str] = []
        # The skew is real: the child's wall clock is `offset` from ours.
        reported = float(self.expect("clock").split()[1])
        assert abs(reported - time.time() - offset) < 5, (reported, time.time(), offset)

    def expect(self, wanted: str, timeout: float = 60.0) -> str:
        """Read lines until one starts with `wanted`; fail if the process ends first."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line.strip())
            if line.startswith(wanted):
                return line.strip()
        raise AssertionError(f"no {wanted!r} line; got {self.lines}; stderr: {self.stderr_tail()}")

    def finish(self, timeout: float = 90.0) -> list[str]:
        """The rest of its lines, once it exits (killed if it is still running at `timeout`)."""
        assert self.proc.stdout is not None
        stop = threading.Timer(timeout, self.proc.kill)
        stop.start()
        try:
            self.lines += [line.strip() for line in self.proc.stdout.read().splitlines()]
            self.proc.wait()
        finally:
            stop.cancel()
        assert self.proc.returncode == 0, self.stderr_tail()
        return self.lines

    def stderr_tail(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        self.errors.seek(0)
        return self.errors.read()[-2000:]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def spawn(subprocess_env: dict[str, str]) -> Iterator[object]:
    children: list[Child] = []

    def start(offset: float, kind: str, key: str, work: float) -> Child:
        child = Child(subprocess_env, offset, kind, key, work)
        children.append(child)
        return child

    yield start
    for child in children:
        if child.proc.poll() is None:
            child.kill()
        child.errors.close()


@pytest.mark.parametrize("kind", ["once-alo", "once-amo", "singleton"])
def test_instances_with_other_clocks_do_not_run_the_work_again(spawn: object, kind: str) -> None:
    """Only the offset between clocks matters, so the holder keeps true time; one caller is
    120 s ahead of it and one 120 s behind, both calling while it works."""
    key = f"skew-{kind}-{uuid.uuid4().hex[:8]}"
    # The work outlives its in-progress timeout: only heartbeats keep its claim alive.
    holder = spawn(0.0, kind, key, 1.5 * IN_PROGRESS_TIMEOUT)  # type: ignore[operator]
    holder.expect("ran")
    callers = [spawn(offset, kind, key, 0.0) for offset in (SKEW, -SKEW)]  # type: ignore[operator]
    for offset, caller in zip((SKEW, -SKEW), callers, strict=True):
        lines = caller.finish()
        assert "ran" not in lines, f"ran twice: caller {offset:+g} s: {lines}"
        assert "result None" in lines  # skipped: the holder's run is alive
    holder_lines = holder.finish()
    assert holder_lines.count("ran") == 1 and "result sent" in holder_lines


@pytest.mark.parametrize(
    ("kind", "timeout"), [("once-alo", IN_PROGRESS_TIMEOUT), ("singleton", 15.0)]
)
def test_a_killed_holders_key_is_taken_over_on_time_by_instances_with_other_clocks(
    spawn: object, kind: str, timeout: float
) -> None:
    """Two keys, two holders killed at once; one taker 120 s behind, one 120 s ahead."""
    offsets = (-SKEW, SKEW)
    keys = [f"takeover-{kind}-{uuid.uuid4().hex[:8]}" for _ in offsets]
    holders = [spawn(0.0, kind, key, 600.0) for key in keys]  # type: ignore[operator]
    for holder in holders:
        holder.expect("ran")
    for holder in holders:
        holder.kill()
    killed_at = time.monotonic()
    takers = [
        spawn(offset, f"{kind}-wait", key, 0.0)  # type: ignore[operator]
        for offset, key in zip(offsets, keys, strict=True)
    ]
    waited: dict[float, float] = {}

    def watch(offset: float, taker: Child) -> None:
        taker.expect("ran", timeout=60)
        waited[offset] = time.monotonic() - killed_at

    watchers = [
        threading.Thread(target=watch, args=pair) for pair in zip(offsets, takers, strict=True)
    ]
    for watcher in watchers:
        watcher.start()
    for watcher in watchers:
        watcher.join(90)
    for taker in takers:
        assert "result sent" in " ".join(taker.finish())
    assert set(waited) == set(offsets), f"no takeover by {set(offsets) - set(waited)}"
    for offset, seconds in waited.items():
        assert seconds <= timeout + TAKEOVER_SLACK, f"taker {offset:+g} s: {seconds:.1f} s"
