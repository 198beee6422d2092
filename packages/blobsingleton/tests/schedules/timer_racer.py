"""Child process: an instance whose timer fires one occurrence of a scheduled `@once`
function (or whose HTTP endpoint is called for it); each run is a line in the output file.

    python timer_racer.py OUT POLICY SCHEDULE OCCURRENCE [timer|http|check]

`check`: fire nothing; print the function's ledger as JSON after `timers.check` (another
instance asking whether the timer is late).
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timedelta
from typing import Any

from blobsingleton import once
from blobsingleton.testing import timer_request
from blobsingleton.timers import CatchUp, Timer, check, fire

POLICIES = {
    "none": CatchUp.none(),
    "latest": CatchUp.latest(within=timedelta(minutes=30)),
    "each": CatchUp.each(within=timedelta(minutes=30)),
}
#: Every occurrence of the test's schedule is minutes apart; one fired within this is on time.
GRACE = timedelta(seconds=90)


def make(policy: str, schedule: str, out: str) -> Any:
    """The scheduled function every instance runs (one scope: this module's `make.work`)."""

    @once("tick-{occurrence}", schedule=Timer(schedule, catch_up=POLICIES[policy], grace=GRACE))
    def work(timer: Any) -> None:
        with open(out, "a") as f:
            f.write(f"{timer.schedule_status['Next']} {timer.past_due} {os.getpid()}\n")

    return work


def main() -> None:
    out, policy, schedule, occurrence, how = (*sys.argv[1:5], (sys.argv[5:] or ["timer"])[0])
    work = make(policy, schedule, out)
    moment = datetime.fromisoformat(occurrence)
    if how == "check":
        print(json.dumps(check(work)[0].to_dict()))
    elif how == "http":
        fire(work, moment)
    else:
        work(timer_request(moment))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import timer_racer  # the functions' scope is this module's, as in the parent's import

    timer_racer.main()
