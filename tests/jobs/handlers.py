"""Unit handlers for the tests, named in JOB_UNIT_HANDLER."""

from __future__ import annotations

import os
import time

from shared.jobs import PermanentUnitError, Unit


def reject_odd(unit: Unit) -> None:
    if int(unit.unit_id[1:]) % 2:
        raise PermanentUnitError(f"unit {unit.unit_id} is odd")


def flaky(unit: Unit) -> None:
    raise RuntimeError("downstream service unavailable")


def slow(unit: Unit) -> None:
    time.sleep(float(os.environ.get("TEST_UNIT_SECONDS", "0.05")))


def until(unit: Unit) -> None:
    """Finish at the wall-clock time TEST_UNIT_UNTIL, so units on many workers end together."""
    time.sleep(max(0.0, float(os.environ["TEST_UNIT_UNTIL"]) - time.time()))
