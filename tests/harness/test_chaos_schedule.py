"""The chaos fault schedule is reproducible from its seed and covers every scheduled kind."""

from __future__ import annotations

import pytest

from harness.faults import SCHEDULED_KINDS, plan_faults


def test_same_seed_gives_the_same_schedule() -> None:
    assert plan_faults(3, 180, 8) == plan_faults(3, 180, 8)
    assert plan_faults(3, 180, 8) != plan_faults(4, 180, 8)


@pytest.mark.parametrize("seconds", [20, 60, 180])
def test_every_kind_is_scheduled_inside_the_fault_window(seconds: int) -> None:
    schedule = plan_faults(11, seconds, 4)
    assert {fault.kind for fault in schedule} == set(SCHEDULED_KINDS)
    assert all(5 <= fault.at <= seconds * 0.75 for fault in schedule)
    assert [fault.at for fault in schedule] == sorted(fault.at for fault in schedule)
    kills = [fault for fault in schedule if fault.kind == "kill_instance"]
    assert all(fault.instance in range(4) for fault in kills)


def test_too_short_a_run_is_refused() -> None:
    with pytest.raises(ValueError, match="at least"):
        plan_faults(1, 10, 4)
