"""What instances report about their invocations, summed by the supervisor: counts, and when
the last invocation of any instance ended (the harness times a run by it, not by when its
polling noticed)."""

from __future__ import annotations

import time

from devhost.stats import WorkerStats
from devhost.supervisor import sum_reports


def test_totals_say_when_the_last_invocation_of_any_instance_ended() -> None:
    first, second = WorkerStats(), WorkerStats()
    assert sum_reports([first.snapshot(), second.snapshot()]).last_finished_at is None
    first.started("f")
    second.started("f")
    before = time.time()
    first.finished("f", ok=True)
    between = time.time()
    second.finished("f", ok=False)
    totals = sum_reports([first.snapshot(), second.snapshot()])
    assert second.last_finished_at is not None and first.last_finished_at is not None
    assert before <= first.last_finished_at <= between <= second.last_finished_at
    assert totals.last_finished_at == second.last_finished_at
    assert (totals.finished, totals.in_flight) == (2, 0)


def test_a_running_invocation_does_not_move_the_end() -> None:
    stats = WorkerStats()
    stats.started("f")
    stats.finished("f", ok=True)
    ended = stats.last_finished_at
    stats.started("f")
    assert sum_reports([stats.snapshot()]).last_finished_at == ended
