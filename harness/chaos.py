"""The chaos run's fault schedule: which fault hits when, drawn from one seeded RNG.

The same seed, run length and instance count always give the same schedule, so a failing
chaos run can be replayed. Every kind is scheduled at least once; the network faults of the
proxy (harness/fault_proxy.py) are drawn per connection by its own seeded RNG instead.
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


# The invariants, checked from what the stores and the recording stand-ins hold after a run.
# Pure functions of recorded data, so they are tested on recordings (tests/devhost/
# test_chaos_invariants.py) and never trust the app's own counters.

#: `@once`'s in-progress record (and the lease) expire after this: a crashed or paused sender's
#: key is taken over then, so its duplicate email comes at most this long after the fault.
IN_PROGRESS_SECONDS = 15.0


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


@dataclass
class Invariant:
    """One promise of the system: whether it held, the numbers that say so, what broke it."""

    name: str
    held: bool
    numbers: dict[str, Any]
    problems: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SentEmail:
    """One email the recording stand-in (the outbox) received; `sent_at` in s after the start."""

    event_id: str
    sent_at: float


def check_emails(
    emails: list[SentEmail],
    expected: set[str],
    executed: list[ExecutedFault],
    faults_end: float,
) -> Invariant:
    """Each expected event emailed once. A duplicate is within the documented window when it is
    the only one for its event (README: "one duplicate possible") and its first copy went out
    while faults were active or within the in-progress timeout after them: a sender killed,
    paused or cut off from storage after the send and before its completion write."""
    copies: dict[str, list[float]] = {}
    for email in emails:
        copies.setdefault(email.event_id, []).append(email.sent_at)
    problems: list[dict[str, Any]] = []
    duplicates = outside = 0
    for event_id, times in sorted(copies.items()):
        if len(times) < 2:
            continue
        times.sort()
        duplicates += len(times) - 1
        first = times[0]
        within = len(times) == 2 and first <= faults_end + IN_PROGRESS_SECONDS
        outside += 0 if within else len(times) - 1
        nearest = min(executed, key=lambda f: abs(f.at - first), default=None)
        problems.append({
            "kind": "duplicate",
            "event_id": event_id,
            "copies": len(times),
            "sent_at": [round(t, 2) for t in times],
            "within_documented_window": within,
            "nearest_fault": None if nearest is None else {"kind": nearest.kind, "at": nearest.at},
        })  # fmt: skip
    missing = sorted(expected - set(copies))
    unexpected = sorted(set(copies) - expected)
    problems += [{"kind": "missing", "event_id": e} for e in missing]
    problems += [{"kind": "unexpected", "event_id": e} for e in unexpected]
    numbers = {
        "events": len(expected),
        "emails": len(emails),
        "distinct_emailed": len(set(copies) & expected),
        "duplicates": duplicates,
        "duplicates_within_window": duplicates - outside,
        "duplicates_outside_window": outside,
        "missing": len(missing),
        "unexpected": len(unexpected),
        "exactly_once": duplicates == 0 and not missing and not unexpected,
    }
    held = not missing and not unexpected and outside == 0
    return Invariant("each event emailed exactly once", held, numbers, problems)


def count_stale_writes(rows: list[tuple[int, float]]) -> int:
    """Rows written by a lease holder after a newer holder had already written.

    `rows` are (fencing token, last-modified time) of one account's member rows. A row keeps
    the token of its last writer; once a holder with a higher token has written anything, a
    row still carrying a lower token and modified later can only be a stale holder's write."""
    first_write: dict[int, float] = {}
    for token, at in rows:
        first_write[token] = min(at, first_write.get(token, at))
    newer_first: dict[int, float] = {}
    earliest = float("inf")
    for token in sorted(first_write, reverse=True):
        newer_first[token] = earliest
        earliest = min(earliest, first_write[token])
    return sum(1 for token, at in rows if at > newer_first[token])


@dataclass(frozen=True)
class AccountImport:
    """What the stores say about one account's night: read by `imports.account_result`."""

    account: str
    expected_imported: int
    imported: int
    members_in_table: int
    attempts: int
    completed_runs: int
    files_left_in_incoming: int
    stale_writes: int


def check_imports(accounts: list[AccountImport]) -> Invariant:
    """Each account imported once this night (every valid row in the table, the report's
    count, its files moved), and no stale holder's write in the member table.

    A second completed attempt is a re-run: the documented at-least-once window of `@once`
    (the run ended, its completion record did not get written, the next delivery took over).
    It is counted and listed, like a duplicate email, and breaks the invariant only if the
    data shows it (rows or counts off, or a stale write)."""
    broken = [
        a
        for a in accounts
        if a.completed_runs < 1
        or a.imported != a.expected_imported
        or a.members_in_table != a.expected_imported
        or a.files_left_in_incoming
        or a.stale_writes
    ]
    reruns = [a for a in accounts if a.completed_runs > 1 and a not in broken]
    problems = [{"kind": "import", **asdict(a)} for a in broken]
    problems += [{"kind": "rerun", "within_documented_window": True, **asdict(a)} for a in reruns]
    numbers = {
        "accounts": len(accounts),
        "imported_once": len(accounts) - len(broken),
        "exactly_one_completed_run": sum(1 for a in accounts if a.completed_runs == 1),
        "reruns": sum(a.completed_runs - 1 for a in accounts if a.completed_runs > 1),
        "attempts": sum(a.attempts for a in accounts),
        "completed_runs": sum(a.completed_runs for a in accounts),
        "rows_expected": sum(a.expected_imported for a in accounts),
        "rows_in_table": sum(a.members_in_table for a in accounts),
        "stale_writes": sum(a.stale_writes for a in accounts),
    }
    return Invariant("each account imported once, no stale write", not broken, numbers, problems)


def check_callbacks(
    job_ids: list[str], posts: list[tuple[str | None, str | None]], archived: dict[str, int]
) -> Invariant:
    """Each job called back once, or repeats with the same idempotency key (its job id).

    `posts` are (job id, Idempotency-Key) as the recording receiver got them; `archived` maps
    each archived job to its failed units (a unit that used every attempt)."""
    by_job: dict[str, list[str | None]] = {job_id: [] for job_id in job_ids}
    problems: list[dict[str, Any]] = []
    for job_id, key in posts:
        if job_id not in by_job:
            problems.append({"kind": "unknown_job", "job_id": job_id})
            continue
        by_job[job_id].append(key)
    wrong = 0
    for job_id, keys in by_job.items():
        bad = [k for k in keys if k != job_id]
        wrong += len(bad)
        if not keys:
            problems.append({"kind": "missing", "job_id": job_id})
        elif bad:
            problems.append({"kind": "wrong_key", "job_id": job_id, "keys": keys})
        elif len(keys) > 1:
            problems.append({"kind": "same_key_repeat", "job_id": job_id, "callbacks": len(keys)})
        if job_id not in archived:
            problems.append({"kind": "not_archived", "job_id": job_id})
    failed_units = sum(archived.values())
    if failed_units:
        problems.append({"kind": "failed_units", "units": failed_units})
    numbers = {
        "jobs": len(job_ids),
        "exactly_once": sum(1 for keys in by_job.values() if len(keys) == 1),
        "same_key_repeats": sum(
            1 for j, keys in by_job.items() if len(keys) > 1 and all(k == j for k in keys)
        ),
        "missing": sum(1 for keys in by_job.values() if not keys),
        "wrong_keys": wrong,
        "archived": len(archived),
        "failed_units": failed_units,
    }
    held = all(p["kind"] == "same_key_repeat" for p in problems)
    return Invariant("each job called back once (or same-key repeats)", held, numbers, problems)


def check_poison(found: dict[str, list[str]], hostile: dict[str, list[str]]) -> Invariant:
    """Nothing in a poison queue but the hostile bodies fed on purpose, and each of those there.

    Another copy of a hostile body is allowed (delivery is at least once: an instance killed
    between copying a body to poison and deleting the original poisons it again)."""
    problems: list[dict[str, Any]] = []
    repeats = 0
    for queue in sorted(set(found) | set(hostile)):
        bodies, wanted = found.get(queue, []), hostile.get(queue, [])
        for body in sorted(set(bodies) - set(wanted)):
            problems.append({"kind": "unexpected", "queue": queue, "body": body[:200],
                             "copies": bodies.count(body)})  # fmt: skip
        for body in sorted(set(wanted) - set(bodies)):
            problems.append({"kind": "hostile_not_poisoned", "queue": queue, "body": body[:200]})
        repeats += sum(bodies.count(b) - 1 for b in set(bodies) & set(wanted))
    numbers = {
        "hostile_fed": sum(len(v) for v in hostile.values()),
        "in_poison": sum(len(v) for v in found.values()),
        "unexpected": sum(p["copies"] for p in problems if p["kind"] == "unexpected"),
        "hostile_not_poisoned": sum(1 for p in problems if p["kind"] == "hostile_not_poisoned"),
        "hostile_repeat_copies": repeats,
    }
    return Invariant("only the hostile bodies in poison", not problems, numbers, problems)
