"""Timer policies with real processes on Azurite (issue 49): the instances of an app all fire
one occurrence after downtime; the three occurrences missed end, per catch-up policy, as three
catch-ups in order, one catch-up, or three recorded misses, each exactly once; a timer firing
and an external scheduler's HTTP call for one occurrence run it once; a ledger read costs at
most 2 requests."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from blobsingleton.testing import timer_request
from blobsingleton.timers import Outcome, ledger_of

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import timer_racer  # noqa: E402
from libsupport import request_counter  # noqa: E402

RACER = str(HERE / "timer_racer.py")
INSTANCES = 4
STEP = timedelta(minutes=4)


def occurrences() -> tuple[str, list[datetime]]:
    """A schedule whose last five occurrences are 4 minutes apart, the latest this minute:
    T-4 (run before the downtime), T-3..T-1 (missed), T (firing now, on time)."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    moments = [now - STEP * i for i in range(4, -1, -1)]
    minutes = ",".join(str(m.minute) for m in sorted(moments, key=lambda m: m.minute))
    return f"0 {minutes} * * * *", moments


def race(env: dict[str, str], out: Path, policy: str, schedule: str, moment: datetime,
         hows: list[str]) -> None:  # fmt: skip
    children = [
        subprocess.Popen(
            [sys.executable, RACER, str(out), policy, schedule, moment.isoformat(), how], env=env
        )
        for how in hows
    ]
    assert [child.wait(60) for child in children] == [0] * len(children)


@pytest.mark.parametrize(
    ("policy", "runs", "outcomes"),
    [
        ("each", [1, 2, 3, 4], ["caught_up", "caught_up", "caught_up", "ran"]),
        ("latest", [3, 4], ["missed", "missed", "caught_up", "ran"]),
        ("none", [4], ["missed", "missed", "missed", "ran"]),
    ],
)
def test_missed_occurrences_end_per_policy_once_across_instances(
    subprocess_env: dict[str, str], tmp_path: Path, policy: str, runs: list[int],
    outcomes: list[str],
) -> None:  # fmt: skip
    schedule, moments = occurrences()
    out = tmp_path / "runs.txt"
    work = timer_racer.make(policy, schedule, str(out))
    # Before the downtime: T-4 is settled (run late, or under none recorded as missed).
    work(timer_request(moments[0]))
    race(subprocess_env, out, policy, schedule, moments[4], ["timer"] * INSTANCES)
    lines = out.read_text().splitlines()
    ran = [datetime.fromisoformat(line.split()[0].replace("Z", "+00:00")) for line in lines]
    seeded = [] if policy == "none" else [moments[0]]
    assert ran == seeded + [moments[i] for i in runs]  # each once, in order
    request_counter.reset()
    ledger = ledger_of(work)
    assert request_counter.total() <= 2 and ledger.requests <= 2
    assert [str(ledger.entry(moments[i]).outcome) for i in range(1, 5)] == outcomes  # type: ignore[union-attr]


def test_a_timer_firing_and_an_http_call_run_the_occurrence_once(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    schedule, moments = occurrences()
    out = tmp_path / "runs.txt"
    race(subprocess_env, out, "latest", schedule, moments[4], ["http", "timer", "http", "timer"])
    assert len(out.read_text().splitlines()) == 1
    work = timer_racer.make("latest", schedule, str(out))
    assert ledger_of(work).entry(moments[4]).outcome == Outcome.RAN  # type: ignore[union-attr]


def test_a_timer_whose_host_stopped_firing_is_reported_late_by_another_process(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    schedule, moments = occurrences()
    out = tmp_path / "runs.txt"
    timer_racer.make("each", schedule, str(out))(timer_request(moments[0]))  # ran; then nothing
    asked = subprocess.run(
        [sys.executable, RACER, str(out), "each", schedule, moments[4].isoformat(), "check"],
        env=subprocess_env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    ledger = json.loads(asked.stdout)
    late = [f"{m:%Y-%m-%dT%H:%M:%SZ}" for m in moments[1:4]]
    assert ledger["late"] is True and ledger["missed"] == late
    for occurrence in late:  # each named in a warning record, with the function
        assert "event=timer_late" in asked.stderr and f"occurrence={occurrence}" in asked.stderr
    assert "function=make.<locals>.work" in asked.stderr
