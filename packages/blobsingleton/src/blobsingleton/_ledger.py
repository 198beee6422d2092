"""The ledger of a scheduled `@once` function: each occurrence's run-once record read as its
entry, the occurrences due and not recorded beside them (docs/schedules.md, "The ledger").

The record of `{occurrence}` *is* the entry: a run writes it (in progress, then completed), a
policy that passes an occurrence over writes one in its place (`mark`, a completed record
whose result is a ledger marker, which a late firing of that occurrence replays as None). A
ledger is read with at most two requests (`read`): one listing of the records of the
window's one or two calendar buckets (an hour, a day, a month or a year of keys), each of
which carries its record in its metadata."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any
from urllib.parse import unquote

from azure.core.exceptions import HttpResponseError

from blobsingleton import schedules
from blobsingleton._backends import backends_now
from blobsingleton._blob_records import BlobRecordStore, RecordBlob, quoted_etag
from blobsingleton._connection import resolve_placeholders
from blobsingleton._invocation import current_invocation_id
from blobsingleton._keys import encode_key
from blobsingleton._listing import list_page
from blobsingleton._owner import instance_id
from blobsingleton._records import Record, RecordStore, Status
from blobsingleton._storage_errors import Meaning, meaning
from blobsingleton.errors import RecordConflict

#: The field a stored result is tagged by (`_once.TAG`) and the tag of a ledger marker.
TAG, MARKER = "$t", "ledger"
#: A listing page (the service's largest): a bucket holding more is read in part.
PAGE = 5000
#: How far back a ledger looks by default: this many periods of the schedule, within bounds.
LOOKBACK_PERIODS = 50
MIN_LOOKBACK, MAX_LOOKBACK = timedelta(hours=1), timedelta(days=8)
#: Due occurrences a ledger lists at most (a schedule with seconds over a long window).
MAX_DUE = 10_000
ISO = "%Y-%m-%dT%H:%M:%SZ"


class Outcome(StrEnum):
    """What became of one occurrence."""

    RAN = "ran"
    """Run by a firing within the grace period of its due time."""
    CAUGHT_UP = "caught_up"
    """Run later than the grace period: a catch-up (by policy, or the host's past-due run)."""
    RUNNING = "running"
    """In progress now."""
    FAILED = "failed"
    """Started, and stopped beating without completing (its instance died); taken over at its
    next delivery (at least once), or never (at most once)."""
    MISSED = "missed"
    """Recorded as missed by the catch-up policy: it will not run."""
    SKIPPED = "skipped"
    """Recorded as skipped by the overlap policy: due while an earlier one still ran."""
    DUE = "due"
    """Due within the grace period, nothing recorded yet."""
    LATE = "late"
    """Due longer ago than the grace period and nothing recorded: missed so far, unrecorded
    (the host did not fire it, or a run failed and freed its key)."""


#: Outcomes no record stands behind.
UNRECORDED = frozenset({Outcome.DUE, Outcome.LATE})


@dataclass(frozen=True)
class Entry:
    """One occurrence in the ledger."""

    occurrence: datetime
    outcome: Outcome
    instance: str | None = None
    invocation_id: str | None = None
    started: datetime | None = None
    finished: datetime | None = None
    reason: str | None = None

    @property
    def recorded(self) -> bool:
        return self.outcome not in UNRECORDED

    def to_dict(self) -> dict[str, Any]:
        return {
            "occurrence": _iso(self.occurrence),
            "outcome": str(self.outcome),
            "instance": self.instance,
            "invocation_id": self.invocation_id,
            "started": _iso(self.started) if self.started else None,
            "finished": _iso(self.finished) if self.finished else None,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Ledger:
    """A scheduled function's occurrences from `since` to `now`, each with its outcome."""

    function: str
    schedule: str
    now: datetime
    since: datetime
    grace: timedelta
    entries: tuple[Entry, ...]
    next_due: datetime | None
    #: False: a bucket held more records than one page (the ledger shows the first page's).
    complete: bool = True
    #: Storage requests the read cost.
    requests: int = 0
    _by_occurrence: dict[datetime, Entry] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_occurrence", {e.occurrence: e for e in self.entries})

    def entry(self, occurrence: datetime) -> Entry | None:
        return self._by_occurrence.get(occurrence.astimezone(UTC))

    @property
    def last_recorded(self) -> Entry | None:
        return next((e for e in reversed(self.entries) if e.recorded), None)

    @property
    def last_run(self) -> Entry | None:
        """The latest occurrence run (or running), whatever its outcome."""
        runs = (Outcome.RAN, Outcome.CAUGHT_UP, Outcome.RUNNING, Outcome.FAILED)
        return next((e for e in reversed(self.entries) if e.outcome in runs), None)

    def with_outcome(self, *outcomes: Outcome) -> list[Entry]:
        return [e for e in self.entries if e.outcome in outcomes]

    @property
    def late(self) -> list[Entry]:
        """Occurrences past their grace period with nothing recorded since the last recorded
        one: the host has stopped firing this timer (or its runs fail)."""
        last = self.last_recorded
        return [e for e in self.entries if e.outcome == Outcome.LATE and last is not None
                and e.occurrence > last.occurrence]  # fmt: skip

    @property
    def missed(self) -> list[Entry]:
        """Occurrences recorded missed, and those late with nothing recorded since the first
        recorded one (before it, the function may not have existed)."""
        first = next((e for e in self.entries if e.recorded), None)
        return [e for e in self.entries if e.outcome == Outcome.MISSED or (
            e.outcome == Outcome.LATE and first is not None and e.occurrence > first.occurrence
        )]  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        last = self.last_run
        return {
            "function": self.function,
            "schedule": self.schedule,
            "last_run": None if last is None else {
                "occurrence": _iso(last.occurrence), "outcome": str(last.outcome),
                "instance": last.instance, "invocation_id": last.invocation_id,
                "finished": _iso(last.finished) if last.finished else None,
            },
            "next_due": _iso(self.next_due) if self.next_due else None,
            "late": bool(self.late),
            "missed": [_iso(e.occurrence) for e in self.missed],
            "skipped": [_iso(e.occurrence) for e in self.with_outcome(Outcome.SKIPPED)],
        }  # fmt: skip


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(ISO)


def now() -> datetime:
    """The time occurrences are judged at: the test kit's clock inside `memory_backends()`."""
    return backends_now() or datetime.now(UTC)


def _epoch_now() -> float:
    found = backends_now()
    return found.timestamp() if found is not None else time.time()


@dataclass(frozen=True)
class Keys:
    """How a function's run-once keys name occurrences: `head` + ISO time + `tail`."""

    head: str
    tail: str

    @classmethod
    def of(cls, template: str) -> Keys:
        """The shape of a key template made of `{occurrence}` and `%SETTING%`s; ValueError
        for any other `{field}` (its keys would not be listable by occurrence)."""
        text = resolve_placeholders(template)
        head, found, tail = text.partition("{occurrence}")
        if not found or "{" in head + tail:
            raise ValueError(
                f"a timer's ledger reads keys made of {{occurrence}} and %SETTING%s only: "
                f"{template!r} has {'no {occurrence}' if not found else 'another field'}"
            )
        return cls(head, tail)

    def key(self, occurrence: datetime) -> str:
        return f"{self.head}{_iso(occurrence)}{self.tail}"

    def occurrence(self, key: str) -> datetime | None:
        if not (key.startswith(self.head) and key.endswith(self.tail)):
            return None
        middle = key[len(self.head) : len(key) - len(self.tail)]
        try:
            return datetime.strptime(middle, ISO).replace(tzinfo=UTC)
        except ValueError:
            return None


def lookback(schedule: schedules.Schedule, at: datetime) -> timedelta:
    """How far back a ledger looks by default: LOOKBACK_PERIODS periods, 1 hour to 8 days."""
    period = _period(schedule, at)
    return min(MAX_LOOKBACK, max(MIN_LOOKBACK, LOOKBACK_PERIODS * period))


def _period(schedule: schedules.Schedule, at: datetime) -> timedelta:
    if isinstance(schedule, schedules.TimeSpanSchedule):
        return schedule.interval
    try:
        latest = schedule.previous_at_or_before(at)
        return schedule.next_after(latest) - latest
    except schedules.NoOccurrence:
        return MAX_LOOKBACK


def due_between(schedule: schedules.Schedule, since: datetime, until: datetime) -> list[datetime]:
    """The host's occurrences after `since`, up to `until` (none for a TimeSpan schedule,
    whose occurrences count from whenever it last ran)."""
    if not isinstance(schedule, schedules.CronSchedule):
        return []
    found: list[datetime] = []
    moment = since
    try:
        while len(found) < MAX_DUE:
            moment = schedule.next_after(moment)
            if moment > until:
                break
            found.append(moment)
    except schedules.NoOccurrence:
        pass
    return found


def read(
    store: RecordStore, keys: Keys, schedule_text: str, *, function: str = "",
    at: datetime | None = None, since: datetime | None = None,
    grace: timedelta = timedelta(minutes=1),
) -> Ledger:  # fmt: skip
    """The ledger of the function whose records `store` holds under `keys`, from `since`
    (default: `lookback`) to `at` (default: now): at most 2 storage requests."""
    text = resolve_placeholders(schedule_text)
    parsed = schedules.parse_schedule(text)
    at = (at or now()).astimezone(UTC)
    since = since or at - lookback(parsed, at)
    due = due_between(parsed, since, at)
    listed, complete, requests = _listed(store, keys, since, at, due)
    entries: dict[datetime, Entry] = {}
    for moment in due:
        late = at - moment > grace
        entries[moment] = Entry(moment, Outcome.LATE if late else Outcome.DUE)
    for moment, record in listed.items():
        if moment <= at + schedules.EARLY_FIRE:
            entries[moment] = entry_of(moment, record, grace)
    ordered = tuple(entries[m] for m in sorted(entries))
    if isinstance(parsed, schedules.CronSchedule):
        try:
            next_due: datetime | None = parsed.next_after(at)
        except schedules.NoOccurrence:
            next_due = None
    else:
        recorded = [e.occurrence for e in ordered if e.recorded]
        next_due = (recorded[-1] if recorded else at) + parsed.interval
    return Ledger(function, text, at, since, grace, ordered, next_due, complete, requests)


def entry_of(occurrence: datetime, record: Record | None, grace: timedelta) -> Entry:
    """The entry a record stands for (None: listed without its record: a run's, large)."""
    if record is None:
        return Entry(occurrence, Outcome.RAN)
    result = record.result
    started = datetime.fromtimestamp(record.started_at, UTC)
    if isinstance(result, dict) and result.get(TAG) == MARKER:
        return Entry(
            occurrence, Outcome(result.get("outcome", Outcome.MISSED)), record.owner or None,
            result.get("invocation_id"), None, started, result.get("reason"),
        )  # fmt: skip
    if record.status == Status.IN_PROGRESS:
        outcome = Outcome.FAILED if record.expired() else Outcome.RUNNING
        return Entry(occurrence, outcome, record.owner or None, None, started)
    finished = datetime.fromtimestamp(record.written_at, UTC) if record.written_at else None
    late = started - occurrence > grace
    return Entry(
        occurrence, Outcome.CAUGHT_UP if late else Outcome.RAN, record.owner or None, None,
        started, finished,
    )  # fmt: skip


def mark(
    store: RecordStore, keys: Keys, occurrence: datetime, outcome: Outcome, reason: str,
    retention: float,
) -> bool:  # fmt: skip
    """Record `occurrence` as passed over (missed or skipped) unless a record of it exists
    (a run, or another instance's mark): True if this call recorded it."""
    at = _epoch_now()
    marker = {TAG: MARKER, "outcome": str(outcome), "reason": reason,
              "invocation_id": current_invocation_id()}  # fmt: skip
    record = Record(
        key=keys.key(occurrence), status=Status.COMPLETED, started_at=at,
        expires_at=at + retention, ttl=retention, owner=instance_id(),
        result={k: v for k, v in marker.items() if v is not None},
    )  # fmt: skip
    try:
        store.put_if_absent(record)
    except RecordConflict:
        return False
    return True


# -- reading the records: one listing of at most two buckets ---------------------------------------

#: The calendar buckets of ISO keys, finest first: (characters of the key, step to the next).
_WIDTHS = (13, 10, 7, 4)


def buckets(since: datetime, until: datetime) -> list[str]:
    """The one or two key prefixes (an hour, a day, a month or a year of ISO times) that cover
    `since` to `until`: the finest width whose buckets of the two are equal or adjacent."""
    first, last = _iso(since), _iso(until)
    for width in _WIDTHS:
        a, b = first[:width], last[:width]
        if a == b:
            return [a]
        if _following(a, width) == b:
            return [a, b]
    return [""]


def _following(bucket: str, width: int) -> str:
    if width == 4:
        return f"{int(bucket) + 1:04d}"
    if width == 7:
        year, month = int(bucket[:4]), int(bucket[5:7])
        return f"{year + month // 12:04d}-{month % 12 + 1:02d}"
    step = timedelta(hours=1) if width == 13 else timedelta(days=1)
    form = "%Y-%m-%dT%H" if width == 13 else "%Y-%m-%d"
    moment = datetime.strptime(bucket, form).replace(tzinfo=UTC) + step
    return moment.strftime(form)


def _listed(
    store: RecordStore, keys: Keys, since: datetime, until: datetime, due: list[datetime]
) -> tuple[dict[datetime, Record | None], bool, int]:
    """The records of occurrences in the buckets covering `since`..`until`, whether every one
    was read, and the requests it cost (a store with no listing: a read per `due` one)."""
    prefixes = [keys.head + bucket for bucket in buckets(since, until)]
    if isinstance(store, BlobRecordStore):
        return _blob_listing(store, keys, prefixes)
    records = getattr(store, "records", None)
    if isinstance(records, dict):  # a store keeping its records in a dict (the test kit's)
        if hasattr(store, "requests"):
            store.requests += 1
        found = {}
        for key, record in list(records.items()):
            moment = keys.occurrence(key)
            if moment is not None and key.startswith(tuple(prefixes)):
                found[moment] = record.with_(read_at=_epoch_now())
        return found, True, 1
    # A store of the user's own without a listing: each due occurrence read alone.
    listed: dict[datetime, Record | None] = {}
    for moment in due:
        record = store.get(keys.key(moment))
        if record is not None:
            listed[moment] = record
    return listed, True, len(due)


def _blob_listing(
    store: BlobRecordStore, keys: Keys, prefixes: list[str]
) -> tuple[dict[datetime, Record | None], bool, int]:
    container = store._container  # the store's own container client (no second client made)
    base = f"{store.prefix}/"
    found: dict[datetime, Record | None] = {}
    complete = True
    requests = 0
    for key_prefix in prefixes:
        requests += 1
        try:
            page = list_page(container, base + encode_key(key_prefix), PAGE)
        except HttpResponseError as error:
            if meaning(error) is Meaning.NO_CONTAINER:
                return {}, True, requests  # no records yet
            raise
        complete = complete and not page.next_marker
        for item in page.items:
            moment = keys.occurrence(unquote(item.name[len(base) :]))
            if moment is None:
                continue
            found[moment] = RecordBlob.from_metadata(
                item.metadata, quoted_etag(item.etag), item.last_modified, page.served_at,
                summary=True,
            )  # fmt: skip
    return found, complete, requests
