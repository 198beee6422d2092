"""The chaos run's invariants, checked from what the stores and the recording stand-ins hold.

The checks (`check_emails`, `check_imports`, `check_callbacks`, `check_poison`) are pure
functions of recorded data, so they are tested on recordings (tests/harness/
test_chaos_invariants.py) and never trust the app's own counters; `observe` and `settled`
read that data from the run's stores (outbox, member table, job archives, poison queues) and
the callback receiver.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from harness import kit
from harness.faults import ExecutedFault
from harness.scenarios import imports, notifications

if TYPE_CHECKING:
    from harness.callbacks import CallbackReceiver
    from harness.chaos_workload import Workload
    from shared.jobs import JobStore

#: `@once`'s in-progress record (and the lease) expire after this: a crashed or paused sender's
#: key is taken over then, so its duplicate email comes at most this long after the fault.
IN_PROGRESS_SECONDS = 15.0
#: The faults behind the documented at-least-once window: a sender killed or paused after the
#: send and before its completion write, or storage gone (restarted) over that write.
PROCESS_FAULTS = ("kill_instance", "pause_lease_holder", "restart_azurite")
#: How long before the first copy such a fault may have come and still be the cause (a
#: restart that began just before the send, its completion write failing after it).
CAUSE_BEFORE_SECONDS = 5.0


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
    the only one for its event (docs/guarantees.md: "one duplicate possible") and a process
    fault (a kill,
    a pause, the Azurite restart: `PROCESS_FAULTS`) was carried out between
    `CAUSE_BEFORE_SECONDS` before its first copy and the in-progress timeout after it: a
    sender killed, paused or cut off from storage after the send and before its completion
    write. Any other duplicate (one during server errors or network faults alone) breaks the
    invariant: those the app must find out."""
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
        causes = [
            f for f in executed
            if f.kind in PROCESS_FAULTS and f.injected
            and first - CAUSE_BEFORE_SECONDS <= f.at <= first + IN_PROGRESS_SECONDS
        ]  # fmt: skip
        within = len(times) == 2 and bool(causes) and first <= faults_end + IN_PROGRESS_SECONDS
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


# Reading the run's stores


def expected_event_ids(workload: Workload) -> set[str]:
    """The notification events fed, and one import summary per account for tonight."""
    from shared.imports.keys import summary_event_id

    today = datetime.now(UTC).date().isoformat()
    expected = {notifications.event(n)["event_id"] for n in range(1, workload.events + 1)}
    return expected | {summary_event_id(a, today) for a in workload.accounts}


def settled(workload: Workload, store: JobStore, receiver: CallbackReceiver) -> bool:
    """Every account reported, every job called back and archived, then the notification
    and unit queues empty (a message being worked on is invisible, but counted).

    The import queue and the instances' in-flight count are not waited for: the nightly
    timer fires every 5 s on every instance and fans out again (skipped by `@once`)."""
    container = workload.container("IMPORTS_CONTAINER")
    for name in workload.accounts:
        blobs = container.list_blobs(name_starts_with=f"{name}/reports/")
        if not any(b.name.endswith("/report.json") for b in blobs):
            return False
    called = set(receiver.by_job())
    if not all(j in called and store.read_job(j) is None for j in workload.job_ids):
        return False
    if sum(kit.queue_depths(workload.work_queues(), workload.storage).values()):
        return False
    outbox = workload.container("EMAIL_OUTBOX_CONTAINER")
    emailed = {unquote(b.name.partition("/")[0]) for b in outbox.list_blobs()}
    return expected_event_ids(workload) <= emailed


def observe(
    workload: Workload,
    receiver: CallbackReceiver,
    executed: list[ExecutedFault],
    started_at: float,
) -> list[Invariant]:
    """Every invariant, from the outbox, the member table, the job archives, the poison
    queues and the callback receiver; times in seconds after `started_at`."""
    from azure.data.tables import TableServiceClient

    from shared.imports.member_table import is_member_row
    from shared.notifications.outbox import read_outbox

    def at(created: datetime | None) -> float:
        return round((created.timestamp() if created else time.time()) - started_at, 2)

    emails = read_outbox(workload.containers["EMAIL_OUTBOX_CONTAINER"])
    sent = [SentEmail(e.event_id, at(e.created)) for e in emails]

    assert workload.storage.connection_string is not None
    members = TableServiceClient.from_connection_string(
        workload.storage.connection_string,
        raw_request_hook=kit.scenario_counter,
        **kit.harness_table_options(),
    ).get_table_client(workload.table)
    container = workload.container("IMPORTS_CONTAINER")
    results = []
    for name in workload.accounts:
        result, _ = imports.account_result(
            container,
            members,
            emails,
            name,
            workload.rows_per_account,
            workload.expected_rows[name],
        )
        rows = [
            (int(e.get("FencingToken", 0)), _modified(e))
            for e in members.query_entities(f"PartitionKey eq '{name}'")
            if is_member_row(e["RowKey"])
        ]
        results.append(AccountImport(
            name, result.expected_imported, result.imported, result.members_in_table,
            result.runs, result.completed_runs, result.files_left_in_incoming,
            count_stale_writes(rows),
        ))  # fmt: skip

    store = workload.job_run.store()
    archived = {}
    for job_id in workload.job_ids:
        record = store.read_archive(job_id)
        if record is not None:
            archived[job_id] = int(record["completion"]["units_failed"])
    posts = [(p.job_id, p.idempotency_key) for p in receiver.posts]

    found: dict[str, list[str]] = {}
    for queue in workload.all_queues():
        if queue.endswith("-poison"):
            bodies = _peek_all(kit.queue_client(queue, workload.storage))
            if bodies:
                found[queue] = bodies
    return [
        check_emails(sent, expected_event_ids(workload), executed, workload.faults_end),
        check_imports(results),
        check_callbacks(workload.job_ids, posts, archived),
        check_poison(found, workload.expected_poison()),
    ]


def _modified(entity: Any) -> float:
    """The row's last write, on the storage service's clock (epoch seconds)."""
    stamp = entity.metadata.get("timestamp")
    return float(stamp.timestamp()) if stamp is not None else 0.0


def _peek_all(client: Any) -> list[str]:
    """Every body in a (small) poison queue, left in place: received invisibly for a moment,
    then made visible again."""
    bodies: list[str] = []
    received = []
    with contextlib.suppress(Exception):
        for message in client.receive_messages(messages_per_page=32, visibility_timeout=30):
            bodies.append(bytes(message.content).decode("utf-8", "replace"))
            received.append(message)
    for message in received:
        with contextlib.suppress(Exception):
            client.update_message(message, visibility_timeout=0)
    return bodies
