"""Instances whose wall clocks disagree by minutes still run the work once, and take over a
crashed holder's key on time: every expiry is judged in storage's time.

Two real processes race on one key against a real Azurite, one of them with `time.time()`
shifted by 120 s either way, 600 s for the takeovers (monotonic clocks untouched, as on a VM
resumed from a pause).
Before expiry moved to storage's time, a record stamped by one clock and judged by another
ran the work twice (caller ahead) or held a crashed run's key two minutes too long (behind).
"""

from __future__ import annotations

import os
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
from azure.storage.blob import BlobServiceClient

CHILD = [str(Path(__file__).resolve().parents[1] / "skew" / "skewed_child.py")]
SKEW = 120.0
#: The takeover test's clocks are further apart, so that a takeover judged by a taker's own
#: clock (600 s late, or at once) stays apart from one judged in storage's time even under
#: a bound of ten times what the latter takes on an idle machine.
TAKEOVER_SKEW = 600.0
#: Short enough that the work outlives several heartbeats, long enough for a loaded machine.
IN_PROGRESS_TIMEOUT = 2.0
#: Storage's times are whole seconds (up to 2 s late), a waiter polls every second, and a
#: loaded 2-core machine starts a Python process in about a second.
TAKEOVER_SLACK = 5.0


class Child:
    """One skewed process; its lines are read as they come (events, not sleeps). Its stdout is
    only ever read through one buffered reader (a `communicate()` after a `readline()` would
    miss the lines that reader had already buffered); stderr goes to a file."""

    def __init__(
        self, env: dict[str, str], offset: float, kind: str, key: str, work: float, told: bool
    ):
        self.errors = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed by the fixture)
        args = [str(offset), kind, key, str(work), str(IN_PROGRESS_TIMEOUT)]
        self.proc = subprocess.Popen(
            [sys.executable, *CHILD, *args, *(["until-told"] if told else [])],
            env=env,
            stdin=subprocess.PIPE,
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

    def tell(self) -> None:
        """End an `until-told` child's work (it has worked its WORK_SECONDS by then)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

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

    def start(offset: float, kind: str, key: str, work: float, told: bool = False) -> Child:
        child = Child(subprocess_env, offset, kind, key, work, told)
        children.append(child)
        return child

    yield start
    for child in children:
        if child.proc.poll() is None:
            child.kill()
        child.errors.close()


def _token(lines: list[str]) -> int | None:
    """The fencing token of a `singleton` child's run ("ran TOKEN"), None if it did not run."""
    ran = [line for line in lines if line.split()[:1] == ["ran"]]
    assert len(ran) <= 1, lines
    return int(ran[0].split()[1]) if ran else None


def _stored_token(key: str) -> int:
    """The token the children's fenced store holds for `key` (skewed_child.fenced_write)."""
    service = BlobServiceClient.from_connection_string(os.environ["AzureWebJobsStorage"])
    blob = service.get_blob_client("fenced-store", key)
    return int(blob.get_blob_properties().metadata["token"])


@pytest.mark.parametrize("kind", ["once-alo", "once-amo", "singleton"])
def test_instances_with_other_clocks_do_not_run_the_work_again(spawn: object, kind: str) -> None:
    """Only the offset between clocks matters, so the holder keeps true time; one caller is
    120 s ahead of it and one 120 s behind, both calling while it works.

    A `@singleton` lease keeps the work to one holder only while the holder renews it: a holder
    starved past its 15 s period (a loaded machine can do that to a 3 s run) has lost the key,
    and another may run. What the lease keeps then is that the starved holder is told
    (`ensure_held()` raises, `lost` is set, the call raises `LeaseLost`) and its fenced writes
    lose to the newer holder's; a holder that was not starved keeps the key, and nobody else
    runs. (The starved case, forced with SIGSTOP, is the next test.)"""
    key = f"skew-{kind}-{uuid.uuid4().hex[:8]}"
    # The work outlives its in-progress timeout (only heartbeats keep its claim alive), and it
    # ends only once both callers have returned: they called while it worked.
    holder = spawn(0.0, kind, key, 1.5 * IN_PROGRESS_TIMEOUT, told=True)  # type: ignore[operator]
    holder.expect("ran")
    callers = [spawn(offset, kind, key, 0.0) for offset in (SKEW, -SKEW)]  # type: ignore[operator]
    callers_lines = {offset: c.finish() for offset, c in zip((SKEW, -SKEW), callers, strict=True)}
    holder.tell()
    holder_lines = holder.finish()
    if kind != "singleton":
        for offset, lines in callers_lines.items():
            assert "ran" not in lines, f"ran twice: caller {offset:+g} s: {lines}"
            assert "result None" in lines  # skipped: the holder's run is alive
        assert holder_lines.count("ran") == 1 and "result sent" in holder_lines
        return
    first = _token(holder_lines)
    assert first is not None, holder_lines
    ran = {offset: _token(lines) for offset, lines in callers_lines.items()}
    if "held" in holder_lines:  # renewed throughout: the key was never free
        for offset, lines in callers_lines.items():
            assert ran[offset] is None, f"ran twice: caller {offset:+g} s: {lines}"
            assert "result None" in lines  # skipped: the holder's lease is alive
        assert "write accepted" in holder_lines and "result sent" in holder_lines
    else:  # starved past its lease: told, and the store never goes back to its token
        assert "lost lost_set=True" in holder_lines and "result LeaseLost" in holder_lines
        for offset, token in ran.items():
            assert token is None or token > first, (offset, token, first)
    assert _stored_token(key) == max(t for t in (first, *ran.values()) if t is not None)


@pytest.mark.slow
def test_a_holder_starved_past_its_lease_is_told_and_its_fenced_write_refused(
    spawn: object,
) -> None:
    """The holder is stopped (SIGSTOP) while it works, past its 15 s lease; an instance 120 s
    ahead of it waits for the key and runs. Resumed, the holder learns that it lost the lease
    (`ensure_held()` raises, `lost` is set, the call raises `LeaseLost`) and the store refuses
    its write, whose token is older than the one that ran after it."""
    key = f"starved-{uuid.uuid4().hex[:8]}"
    holder = spawn(0.0, "singleton", key, 10.0)  # type: ignore[operator]
    first = int(holder.expect("ran").split()[1])
    holder.proc.send_signal(signal.SIGSTOP)  # within its 10 s of work: it holds the key
    try:
        taker = spawn(SKEW, "singleton-wait", key, 0.0)  # type: ignore[operator]
        taker_lines = taker.finish()  # it ran once the stopped holder's lease expired
    finally:
        holder.proc.send_signal(signal.SIGCONT)
    holder_lines = holder.finish()
    second = _token(taker_lines)
    assert second is not None and second > first, (first, taker_lines)
    assert {"held", "write accepted", "result sent"} <= set(taker_lines), taker_lines
    assert "lost lost_set=True" in holder_lines, holder_lines
    assert "write refused" in holder_lines and "result LeaseLost" in holder_lines, holder_lines
    assert _stored_token(key) == second


@pytest.mark.parametrize(
    ("kind", "timeout"), [("once-alo", IN_PROGRESS_TIMEOUT), ("singleton", 15.0)]
)
def test_a_killed_holders_key_is_taken_over_on_time_by_instances_with_other_clocks(
    spawn: object, kind: str, timeout: float
) -> None:
    """Two keys, two holders killed at once; one taker 600 s behind, one 600 s ahead. How soon
    a takeover comes is `bench skew`'s and `bench failover`'s claim; here it comes within ten
    times what it takes on an idle machine, which a clock-judged expiry would miss by far."""
    offsets = (-TAKEOVER_SKEW, TAKEOVER_SKEW)
    bound = 10 * (timeout + TAKEOVER_SLACK)
    assert bound < TAKEOVER_SKEW
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
        taker.expect("ran", timeout=bound + 30)
        waited[offset] = time.monotonic() - killed_at

    watchers = [
        threading.Thread(target=watch, args=pair) for pair in zip(offsets, takers, strict=True)
    ]
    for watcher in watchers:
        watcher.start()
    for watcher in watchers:
        watcher.join(bound + 60)
    for taker in takers:
        assert "result sent" in " ".join(taker.finish())
    assert set(waited) == set(offsets), f"no takeover by {set(offsets) - set(waited)}"
    for offset, seconds in waited.items():
        assert seconds <= bound, f"taker {offset:+g} s: {seconds:.1f} s"
