"""The chaos run's fault schedule: which fault hits when, drawn from one seeded RNG.

The same seed, run length and instance count always give the same schedule, so a failing
chaos run can be replayed. Every kind is scheduled at least once; the network faults of the
proxy (harness/fault_proxy.py) are drawn per connection by its own seeded RNG instead. How a
fault is carried out is `harness/injectors.py`; what must hold afterwards, `invariants.py`.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any

#: Process and service faults the chaos run injects on a schedule.
SCHEDULED_KINDS = ("kill_instance", "pause_lease_holder", "restart_azurite")

#: How long a paused holder stays stopped: past the 15 s lease, so another instance takes over.
PAUSE_SECONDS = 20.0


@dataclass(frozen=True)
class ScheduledFault:
    """One fault: its kind, when (seconds after the start) and which instance, if any."""

    at: float
    kind: str
    instance: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_faults(seed: int, seconds: float, instances: int) -> list[ScheduledFault]:
    """A sorted schedule over the middle of the run, leaving its last quarter to settle.

    Kills come about every 10 s; one Azurite restart, and one pause per 60 s (at least one).
    Faults start after 5 s so the flows are under way, and end by 75 % of the run so
    the invariants are checked after the system had time to recover.
    """
    if instances < 1 or seconds < 20:
        raise ValueError("a chaos run needs at least 1 instance and 20 seconds")
    rng = random.Random(seed)
    start, end = 5.0, seconds * 0.75
    faults = [
        ScheduledFault(round(rng.uniform(start, end), 2), "kill_instance", rng.randrange(instances))
        for _ in range(max(1, int(seconds // 10)))
    ]
    faults += [
        ScheduledFault(round(rng.uniform(start, end), 2), "pause_lease_holder")
        for _ in range(max(1, int(seconds // 60)))
    ]
    faults.append(ScheduledFault(round(rng.uniform(start, end), 2), "restart_azurite"))
    return sorted(faults, key=lambda fault: (fault.at, fault.kind))


@dataclass(frozen=True)
class ExecutedFault:
    """A scheduled fault as it was carried out: when (s after the start), on what, its effect."""

    at: float
    kind: str
    instance: int | None = None
    pid: int | None = None
    detail: str = ""
    injected: bool = True

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
