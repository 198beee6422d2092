"""Every occurrence of a timer accounted for: its ledger, catch-up and overlap policies, and
late occurrences that raise their hand (docs/schedules.md).

    from datetime import timedelta
    from blobsingleton import once
    from blobsingleton.timers import CatchUp, Overlap, Timer

    @once("nightly-{occurrence}", schedule=Timer(
        "%IMPORT_SCHEDULE%", catch_up=CatchUp.latest(within=timedelta(days=1)),
        overlap=Overlap.skip()))
    def fan_out_night(timer: func.TimerRequest) -> None: ...

The run-once record of each `{occurrence}` is its ledger entry (`Ledger`, `Entry`,
`Outcome`); `ledger_of(fn)` reads it in at most 2 requests; `check(*fns)` reports (an
`event=timer_late` record and the `blobsingleton.timer.late` gauge) every timer whose
occurrences are late past their grace period, from any instance; `fire(fn, occurrence)` runs an
occurrence for an external scheduler, under the same ledger as the timer.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from blobsingleton._events import emit
from blobsingleton._ledger import ISO, Entry, Ledger, Outcome
from blobsingleton._timer_policy import (
    LATE,
    CatchUp,
    Overlap,
    Timer,
    catch_up_timer,
    fire_late,
    governed_of,
)
from blobsingleton.errors import OccurrenceRefused


def ledger_of(
    fn: Callable[..., Any], at: datetime | None = None, since: datetime | None = None
) -> Ledger:
    """The ledger of scheduled `@once` function `fn` (at most 2 storage requests): from
    `since` (default: 50 periods of its schedule, 1 hour to 8 days, or its catch-up window)
    to `at` (default: now; the test kit's clock inside `memory_backends()`)."""
    return governed_of(fn).ledger(at, since)


def check(*functions: Callable[..., Any], at: datetime | None = None) -> list[Ledger]:
    """Each function's ledger; every occurrence late past its timer's grace period (nothing
    recorded since the function's last recorded occurrence) is reported: an `event=timer_late`
    warning naming the function and the occurrence, and the `blobsingleton.timer.late` gauge
    (late occurrences, by function). Callable from any instance: a timer whose host has
    stopped firing is reported by whoever checks."""
    ledgers = []
    for fn in functions:
        ledger = ledger_of(fn, at)
        late = ledger.late
        for entry in late:
            emit("timer_late", warning=True, function=ledger.function,
                 occurrence=entry.occurrence.strftime(ISO),
                 late_s=round((ledger.now - entry.occurrence).total_seconds()))  # fmt: skip
        LATE.set(len(late), {"function": ledger.function})
        ledgers.append(ledger)
    return ledgers


def fire(fn: Callable[..., Any], occurrence: datetime | None = None) -> Any:
    """Run occurrence `occurrence` (default: the latest due) of scheduled `@once` function
    `fn`, whose one argument is its timer, as an external scheduler's HTTP call does: the
    occurrence's run-once key is the timer's, so a timer firing and this call run it once.
    On time within the grace period; later, a catch-up within the catch-up window; else
    `OccurrenceRefused` with its reason (also: not an occurrence, not due yet)."""
    return fire_late(fn, occurrence)


__all__ = [
    "CatchUp", "Entry", "Ledger", "OccurrenceRefused", "Outcome", "Overlap", "Timer",
    "catch_up_timer", "check", "fire", "ledger_of",
]  # fmt: skip
