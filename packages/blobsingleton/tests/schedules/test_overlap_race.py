"""Overlap policies with real processes on Azurite (issue 49): an occurrence due while the
last one still runs, fired by several instances, is recorded skipped under skip (never run),
and runs after the last one under buffer_all; under buffer_one a second one buffered meanwhile
is recorded skipped; never two runs at once."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from blobsingleton import ops
from blobsingleton.schedules import next_occurrence, previous_occurrence
from blobsingleton.timers import Outcome, ledger_of

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import overlap_racer  # noqa: E402

RACER = str(HERE / "overlap_racer.py")
SCHEDULE = "*/2 * * * * *"


def start(env: dict[str, str], out: Path, policy: str, moment: datetime,
          hold: Path | None = None) -> subprocess.Popen[bytes]:  # fmt: skip
    args = [sys.executable, RACER, str(out), policy, SCHEDULE, moment.isoformat()]
    return subprocess.Popen(args + ([str(hold)] if hold else []), env=env)


def wait_for(path: Path, child: subprocess.Popen[bytes]) -> None:
    """Until `path` exists (the child's event), or the child ends without it."""
    while not path.exists():
        assert child.poll() is None, "the holder ended before it started its run"
        time.sleep(0.02)


def due(moment: datetime) -> None:
    """Until the clock reaches `moment` (a timer fires an occurrence once it is due)."""
    while datetime.now(UTC) < moment:
        time.sleep(0.02)


def runs(out: Path) -> list[tuple[str, str, int, float]]:
    found = []
    for line in out.read_text().splitlines():
        what, occurrence, pid, at = line.split()
        found.append((what, occurrence, int(pid), float(at)))
    return found


def never_two_at_once(lines: list[tuple[str, str, int, float]]) -> None:
    depth = 0
    for what, *_ in lines:
        depth += 1 if what == "begin" else -1
        assert depth <= 1, lines


def race(subprocess_env: dict[str, str], tmp_path: Path, policy: str) -> tuple[
        Path, datetime, datetime]:  # fmt: skip
    out, hold = tmp_path / "runs.txt", tmp_path / "hold"
    hold.mkdir()
    first = previous_occurrence(SCHEDULE, datetime.now(UTC))
    holder = start(subprocess_env, out, policy, first, hold)
    wait_for(hold / "started", holder)
    second = next_occurrence(SCHEDULE, first)
    due(second)  # due while the first still runs: every instance fires it
    others = [start(subprocess_env, out, policy, second) for _ in range(3)]
    if policy == "skip":
        assert [child.wait(60) for child in others] == [0, 0, 0]
    (hold / "release").touch()
    assert holder.wait(60) == 0
    assert [child.wait(60) for child in others] == [0, 0, 0]
    return out, first, second


def test_skip_records_the_occurrence_and_never_runs_it(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    out, first, second = race(subprocess_env, tmp_path, "skip")
    lines = runs(out)
    assert [(what, when) for what, when, *_ in lines] == [
        ("begin", first.isoformat()), ("end", first.isoformat())]  # fmt: skip
    sweep = overlap_racer.make("skip", SCHEDULE, str(out))
    entry = ledger_of(sweep).entry(second)
    assert entry is not None and entry.outcome == Outcome.SKIPPED
    assert "still running" in (entry.reason or "")


def test_buffer_all_runs_it_after_the_last_once(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    out, first, second = race(subprocess_env, tmp_path, "buffer_all")
    lines = runs(out)
    never_two_at_once(lines)
    assert [when for what, when, *_ in lines if what == "begin"] == [
        first.isoformat(), second.isoformat()]  # fmt: skip
    assert first + timedelta(seconds=2) == second


def in_line(count: int, *children: subprocess.Popen[bytes]) -> None:
    """Until `count` firings wait in the overlap lease's line (the lock listing's `waiting`)."""
    while True:
        items = ops.list_locks("timer-overlap").items
        if items and items[0]["waiting"] >= count:
            return
        assert all(child.poll() is None for child in children), "a buffered firing ended"
        time.sleep(0.05)


def test_buffer_one_runs_the_first_buffered_and_skips_the_second(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    out, hold = tmp_path / "runs.txt", tmp_path / "hold"
    hold.mkdir()
    first = previous_occurrence(SCHEDULE, datetime.now(UTC))
    holder = start(subprocess_env, out, "buffer_one", first, hold)
    wait_for(hold / "started", holder)
    second = next_occurrence(SCHEDULE, first)
    third = next_occurrence(SCHEDULE, second)
    due(second)
    buffered = start(subprocess_env, out, "buffer_one", second)
    in_line(1, buffered)
    due(third)
    dropped = start(subprocess_env, out, "buffer_one", third)
    in_line(2, buffered, dropped)
    (hold / "release").touch()
    assert [child.wait(60) for child in (holder, buffered, dropped)] == [0, 0, 0]
    lines = runs(out)
    never_two_at_once(lines)
    assert [when for what, when, *_ in lines if what == "begin"] == [
        first.isoformat(), second.isoformat()]  # fmt: skip
    sweep = overlap_racer.make("buffer_one", SCHEDULE, str(out))
    entry = ledger_of(sweep).entry(third)
    assert entry is not None and entry.outcome == Outcome.SKIPPED
    assert "buffered before it" in (entry.reason or "")
