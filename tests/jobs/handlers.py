"""Unit handlers for the tests, named in JOB_UNIT_HANDLER."""

from __future__ import annotations

import os
import time
from pathlib import Path

from shared.jobs import PermanentUnitError, Unit


def reject_odd(unit: Unit) -> None:
    if int(unit.unit_id[1:]) % 2:
        raise PermanentUnitError(f"unit {unit.unit_id} is odd")


def flaky(unit: Unit) -> None:
    raise RuntimeError("downstream service unavailable")


def slow(unit: Unit) -> None:
    time.sleep(float(os.environ.get("TEST_UNIT_SECONDS", "0.05")))


def together(unit: Unit) -> None:
    """Finish once TEST_UNIT_PARTIES units have reached here, so units on many workers end
    together: each leaves a file in the folder TEST_UNIT_BARRIER and waits for all of them."""
    folder = Path(os.environ["TEST_UNIT_BARRIER"])
    parties = int(os.environ["TEST_UNIT_PARTIES"])
    (folder / unit.unit_id).touch()
    deadline = time.monotonic() + 120
    while sum(1 for _ in folder.iterdir()) < parties:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only some of {parties} units reached the barrier")
        time.sleep(0.005)
