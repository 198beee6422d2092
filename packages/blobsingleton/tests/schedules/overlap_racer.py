"""Child process: an instance whose timer fires one occurrence of a sweep under an overlap
policy; each run writes `begin` and `end` lines (pid, time) to the output file. With a hold
folder, the run writes `started` there and waits for `release` before it ends.

    python overlap_racer.py OUT POLICY SCHEDULE OCCURRENCE [HOLD_DIR]
"""

from __future__ import annotations

import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from blobsingleton import once
from blobsingleton.testing import timer_request
from blobsingleton.timers import Overlap, Timer

POLICIES = {
    "skip": Overlap.skip(),
    "buffer_one": Overlap.buffer_one(timeout=60),
    "buffer_all": Overlap.buffer_all(timeout=60),
}


def make(policy: str, schedule: str, out: str, hold: str | None = None) -> Any:
    @once("sweep-{occurrence}", schedule=Timer(schedule, overlap=POLICIES[policy]))
    def sweep(timer: Any) -> None:
        occurrence = timer.schedule_status["Next"]
        with open(out, "a") as f:
            f.write(f"begin {occurrence} {os.getpid()} {time.time()}\n")
        if hold:
            Path(hold, "started").touch()
            while not Path(hold, "release").exists():  # the test's event, as a file
                time.sleep(0.02)
        with open(out, "a") as f:
            f.write(f"end {occurrence} {os.getpid()} {time.time()}\n")

    return sweep


def main() -> None:
    out, policy, schedule, occurrence = sys.argv[1:5]
    hold = sys.argv[5] if len(sys.argv) > 5 else None
    make(policy, schedule, out, hold)(timer_request(datetime.fromisoformat(occurrence)))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import overlap_racer  # the function's scope is this module's, as in the parent's import

    overlap_racer.main()
