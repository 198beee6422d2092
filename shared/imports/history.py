"""Member history: who was added, changed, terminated or reinstated by a run, effective when.

Every import writes one history row per member event next to the member rows (same
partition, same fenced transaction), keyed `~event~{run_id}~{file}~{location}`, so one
run's events are one range query. A row holds ids, codes and dates, never names or birth
dates:

    MemberId, Event (add | change | termination | reinstatement), Status, PreviousStatus,
    Effective (YYYY-MM-DD or absent), Maintenance (INS03, "csv", or "030" for a member an
    audit file left out), Coverages (line/plan/begin/end after the event), RunId,
    SourceFile, SourceLocation, SourceKind (csv | x12-834 | database)

    >>> for event in terminations("acme", "2026-11-22"):     # who was terminated tonight
    ...     print(event.member_id, event.effective)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from azure.core.exceptions import ResourceNotFoundError

from shared.imports.maintenance import EVENTS, TERMINATION_EVENT
from shared.imports.member_table import (
    EVENT_PREFIX,
    Provenance,
    event_key,
    member_from_entity,
    members_table,
)
from shared.imports.records import Member
from shared.imports.validation import member_key


@dataclass(frozen=True)
class MemberEvent:
    """One history row."""

    member_id: str
    event: str
    status: str
    previous_status: str | None
    effective: date | None
    maintenance: str
    run_id: str
    source: str
    location: str
    coverages: tuple[dict[str, Any], ...] = ()
    kind: str = ""  # the source's kind: csv | x12-834 | database

    @classmethod
    def from_entity(cls, entity: Any) -> MemberEvent:
        effective = entity.get("Effective")
        return cls(
            member_id=str(entity.get("MemberId")),
            event=str(entity.get("Event")),
            status=str(entity.get("Status")),
            previous_status=entity.get("PreviousStatus") or None,
            effective=date.fromisoformat(effective) if effective else None,
            maintenance=str(entity.get("Maintenance") or ""),
            run_id=str(entity.get("RunId")),
            source=str(entity.get("SourceFile")),
            location=str(entity.get("SourceLocation")),
            coverages=tuple(json.loads(entity.get("Coverages") or "[]")),
            kind=str(entity.get("SourceKind") or ""),
        )


def event_entity(
    kind: str,
    member: Member,
    previous: Member | None,
    effective: date | None,
    origin: Provenance,
    key_of_file: str,
    suffix: str,
) -> dict[str, Any]:
    """The history row of one event (PartitionKey and token are added by the writer)."""
    if kind not in EVENTS:
        raise ValueError(f"not a history event: {kind}")
    entity: dict[str, Any] = {
        "RowKey": event_key(origin.run_id, key_of_file, suffix),
        "MemberId": member.member_id,
        "MemberKey": member_key(member.member_id),
        "Event": kind,
        "Status": member.status,
        "PreviousStatus": previous.status if previous is not None else "",
        "Maintenance": member.maintenance,
        "Coverages": json.dumps(
            [{k: v for k, v in c.to_dict().items() if k != "level"} for c in member.coverages],
            separators=(",", ":"),
        ),
        "RunId": origin.run_id,
        "SourceFile": origin.source,
        "SourceLocation": origin.location,
    }
    if origin.kind:
        entity["SourceKind"] = origin.kind
    if effective is not None:
        entity["Effective"] = effective.isoformat()
    return entity


def run_events(
    account: str,
    run_id: str,
    *,
    event: str | None = None,
    connection: str = "AzureWebJobsStorage",
) -> Iterator[MemberEvent]:
    """The history rows `run_id` wrote for `account`, in the order the run read them (files
    in name order, records in file order, then an audit file's absent members); only
    `event` if given.

    A nightly run's id is its date, so `run_events(account, "2026-11-22")` also returns
    that day's manual runs ("2026-11-22-manual-..."): one range query either way.
    """
    low = f"{EVENT_PREFIX}{run_id}"
    high = f"{EVENT_PREFIX}{_next_prefix(run_id)}"
    query = "PartitionKey eq @account and RowKey ge @low and RowKey lt @high"
    params: dict[str, Any] = {"account": account, "low": low, "high": high}
    if event is not None:
        query += " and Event eq @event"
        params["event"] = event
    table = members_table(connection)
    for entity in table.query_entities(query, parameters=params):
        yield MemberEvent.from_entity(entity)


def terminations(
    account: str, run_id: str, *, connection: str = "AzureWebJobsStorage"
) -> list[MemberEvent]:
    """Who `run_id` terminated (or cancelled), and effective when."""
    return list(run_events(account, run_id, event=TERMINATION_EVENT, connection=connection))


def member_status(
    account: str, member_id: str, *, connection: str = "AzureWebJobsStorage"
) -> Member | None:
    """A member's stored state (status, coverages, dates), or None if never imported."""
    try:
        entity = members_table(connection).get_entity(account, member_key(member_id))
    except ResourceNotFoundError:
        return None
    return member_from_entity(entity)


def _next_prefix(run_id: str) -> str:
    """The smallest run id after every id starting with `run_id` (a date: the next day)."""
    try:
        return (date.fromisoformat(run_id) + timedelta(days=1)).isoformat()
    except ValueError:
        return run_id[:-1] + chr(ord(run_id[-1]) + 1)
