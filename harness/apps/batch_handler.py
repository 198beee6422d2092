"""The unit handler of the batch scenario: a little work, and now and then a crash.

BATCH_KILL_RATE: on a unit's first delivery, the chance that the instance is SIGKILLed
half-way through the work (taking its other in-flight invocations down with it, whatever
step they are at); the supervisor restarts it. Redeliveries never kill, so every unit ends.
BATCH_WORK_MS: mean duration of a unit's work.
"""

from __future__ import annotations

import os
import random
import signal
import time

from shared.jobs import Unit


def work(unit: Unit) -> None:
    mean = float(os.environ.get("BATCH_WORK_MS") or 10) / 1000.0
    rate = float(os.environ.get("BATCH_KILL_RATE") or 0)
    time.sleep(random.uniform(0, mean))
    if unit.attempt == 1 and random.random() < rate:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(random.uniform(0, mean))
