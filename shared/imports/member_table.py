"""Members and their history in Table Storage, written in fenced entity group transactions.

Table `Members` (app setting MEMBERS_TABLE), one partition per account (PartitionKey =
account). Rows in it:

    RowKey = member key        the member's state: MemberId (the id as the file has it),
                               names, DateOfBirth, Status (active | terminated | cancelled),
                               StatusEffective, EligibilityBegin/End, Coverages (JSON: line,
                               plan, level, begin, end, status per coverage), the first coverage
                               again as Plan/CoverageStart/CoverageEnd, where it came from
    RowKey = "~event~{run}~{file}~{n}"   one history row per add, change, termination or
                               reinstatement: MemberId, Event, Status, PreviousStatus,
                               Effective, source file and location; no names, no birth dates
    RowKey = "~state"          the fencing token of the lease holder that last wrote

The member key is the id with characters Table keys forbid percent-encoded
(`validation.member_key`), so it never starts with "~".

Every transaction is up to 99 row upserts plus a REPLACE of the state row with If-Match
on the ETag this writer last saw: the batch is atomic, so rows land only if no one else
touched the state row since. A newer lease holder writes its (higher) token into the state
row first, which changes the ETag, so the older holder's next transaction fails as a whole,
and it stops with "stale holder: token N < M, stopping" and writes nothing more. This holds
even when the older holder was paused past its lease and never noticed losing it.

A member row also remembers the file version that last wrote it (`FileKey`) and the state
the member had before that file (`BaseState`). An attempt that re-reads a file an earlier,
crashed attempt had half imported starts each such member again from that base, so the
history and the counts come out as if the file had been read once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.data.tables import TableTransactionError, UpdateMode
from blobsingleton import events, settings
from blobsingleton.leases import instance_id

from shared import storage
from shared.imports.duplicates import IdFilter
from shared.imports.keys import LEASE_KEY
from shared.imports.records import ACTIVE, Coverage, Member
from shared.imports.validation import member_key

log = logging.getLogger("shared.imports")

DEFAULT_TABLE = "Members"
STATE_ROW = "~state"
EVENT_PREFIX = "~event~"
#: BaseState of a member that did not exist before the file.
ABSENT = "null"
#: Azure's limit is 100 operations per transaction; one of them is the state row.
MEMBERS_PER_TRANSACTION = 99
#: Member rows read in parallel ahead of the records that need them (`prefetch`).
PREFETCH_THREADS = 8
_CONDITION_FAILED = frozenset({"UpdateConditionNotSatisfied", "ConditionNotMet"})


class StaleHolder(RuntimeError):
    """A newer lease holder has written to this account: this run must stop writing."""

    def __init__(self, account: str, token: int, newer: int | None) -> None:
        if newer is not None and newer > token:
            text = f"stale holder: token {token} < {newer}, stopping"
        else:
            text = f"stale holder: token {token}, the state row changed under us, stopping"
        super().__init__(text)
        self.account = account
        self.token = token
        self.newer = newer


def table_name() -> str:
    return settings.setting("MEMBERS_TABLE", DEFAULT_TABLE) or DEFAULT_TABLE


def members_table(connection: str = "AzureWebJobsStorage") -> Any:
    return storage.table_service(connection).get_table_client(table_name())


@dataclass(frozen=True)
class Provenance:
    """Where a member row came from (kept on the row for audits)."""

    run_id: str
    source: str
    location: str


def is_member_row(row_key: str) -> bool:
    """True for a member's row; the account's own rows (state, history) start with "~"."""
    return not row_key.startswith("~")


def file_key(run_id: str, source: str, etag: str = "") -> str:
    """One version of one source file in one run (a retried attempt gets the same key).

    It starts with the file's name (key-safe, at most 100 characters), so history rows
    sort by file as the run read them (in name order), then by record."""
    text = f"{run_id}\n{source}\n{etag}".encode()
    return f"{member_key(source[:100])}~{hashlib.blake2b(text, digest_size=8).hexdigest()}"


def event_key(run_id: str, key_of_file: str, suffix: str) -> str:
    return f"{EVENT_PREFIX}{run_id}~{key_of_file}~{suffix}"


def member_entity(
    account: str,
    member: Member,
    token: int,
    origin: Provenance,
    *,
    key_of_file: str = "",
    base: str = ABSENT,
) -> dict[str, Any]:
    entity: dict[str, Any] = {
        "PartitionKey": account,
        "RowKey": member_key(member.member_id),
        "MemberId": member.member_id,
        "FirstName": member.first_name,
        "LastName": member.last_name,
        "Plan": member.plan,
        "Status": member.status,
        "Coverages": json.dumps([c.to_dict() for c in member.coverages], separators=(",", ":")),
        "Subscriber": member.subscriber,
        "Relationship": member.relationship,
        "SubscriberId": member.subscriber_id,
        "Maintenance": member.maintenance,
        "ImportRunId": origin.run_id,
        "SourceFile": origin.source,
        "SourceLocation": origin.location,
        "FencingToken": token,
        "FileKey": key_of_file,
        "BaseState": base,
    }
    dates = {
        "DateOfBirth": member.date_of_birth,
        "CoverageStart": member.coverage_start,
        "CoverageEnd": member.coverage_end,
        "StatusEffective": member.status_effective,
        "EligibilityBegin": member.eligibility_begin,
        "EligibilityEnd": member.eligibility_end,
    }
    entity.update({name: value.isoformat() for name, value in dates.items() if value is not None})
    return entity


def member_from_entity(entity: Any) -> Member:
    """A stored member row as a `Member` (rows written before coverages existed included)."""

    def day(name: str) -> date | None:
        value = entity.get(name)
        return date.fromisoformat(value) if isinstance(value, str) and value else None

    coverages: tuple[Coverage, ...] = ()
    if entity.get("Coverages"):
        coverages = tuple(Coverage.from_dict(c) for c in json.loads(entity["Coverages"]))
    elif entity.get("Plan"):
        coverages = (Coverage("", entity["Plan"], day("CoverageStart"), day("CoverageEnd")),)
    return Member(
        member_id=str(entity.get("MemberId") or entity["RowKey"]),
        first_name=str(entity.get("FirstName") or ""),
        last_name=str(entity.get("LastName") or ""),
        date_of_birth=day("DateOfBirth"),
        coverages=coverages,
        status=str(entity.get("Status") or ACTIVE),
        status_effective=day("StatusEffective"),
        eligibility_begin=day("EligibilityBegin"),
        eligibility_end=day("EligibilityEnd"),
        subscriber=bool(entity.get("Subscriber", True)),
        relationship=str(entity.get("Relationship") or ""),
        subscriber_id=str(entity.get("SubscriberId") or ""),
        maintenance=str(entity.get("Maintenance") or ""),
    )


def encode_state(member: Member | None) -> str:
    return json.dumps(member.state(), separators=(",", ":")) if member is not None else ABSENT


def decode_state(text: str) -> Member | None:
    data = json.loads(text or ABSENT)
    return Member.from_state(data) if data is not None else None


@dataclass(frozen=True)
class Prior:
    """A member as a record of file `key_of_file` finds it.

    `member`: the state to apply the record to (None: not a member yet). `base`: the state
    before this file, to store again. `location`: where this attempt already wrote the
    member from this file (None if it did not).
    """

    member: Member | None
    base: str
    location: str | None


class FencedMemberWriter:
    """Writes one account's members under fencing token `token`; `open()` before `add()`."""

    def __init__(
        self,
        account: str,
        token: int,
        run_id: str,
        *,
        table: Any = None,
        batch_size: int = MEMBERS_PER_TRANSACTION,
    ) -> None:
        if not 1 <= batch_size <= MEMBERS_PER_TRANSACTION:
            raise ValueError(f"batch_size must be 1..{MEMBERS_PER_TRANSACTION}")
        self.account = account
        self.token = token
        self.run_id = run_id
        self.batch_size = batch_size
        self._table = table if table is not None else members_table()
        self._etag: str | None = None
        self._pending: dict[str, dict[str, Any]] = {}  # by RowKey: one op per row per batch
        self._cache: dict[str, Any] = {}  # prefetched member rows (None: not there)
        # An account with no members when this writer opened has only the rows it writes:
        # a member it has not written (the filter says "certainly not") needs no read.
        self._fresh = False
        self._written = IdFilter()
        self.rows_written = 0
        self.transactions = 0

    # -- the fence -----------------------------------------------------------------------------
    def open(self) -> None:
        """Put our token into the state row (refusing if a higher one is there)."""
        for _ in range(5):
            state = self._read_state()
            if state is None:
                try:
                    result = self._table.create_entity(self._state_entity())
                except ResourceExistsError:
                    continue  # another holder created it first: read it again
                except ResourceNotFoundError:
                    with contextlib.suppress(ResourceExistsError):
                        self._table.create_table()  # first import ever: no table yet
                    continue
                self._etag = result["etag"]
                self._fresh = self._no_members()
                return
            if int(state.get("Token", 0)) > self.token:
                raise self._stale(int(state["Token"]))
            try:
                result = self._table.update_entity(
                    self._state_entity(),
                    mode=UpdateMode.REPLACE,
                    etag=state.metadata["etag"],
                    match_condition=MatchConditions.IfNotModified,
                )
            except Exception as error:
                if _condition_failed(error):
                    continue  # someone wrote in between: decide again on what is there now
                raise
            self._etag = result["etag"]
            self._fresh = self._no_members()
            return
        raise self._stale(self._current_token())

    def _no_members(self) -> bool:
        """True when the account has no member rows yet (asked once, after our token is in
        the state row, so no older holder can add any later)."""
        query = "PartitionKey eq @account and RowKey lt '~'"
        rows = self._table.query_entities(
            query, parameters={"account": self.account}, select=["RowKey"], results_per_page=1
        )
        return next(iter(rows), None) is None

    def confirm(self) -> None:
        """Raise `StaleHolder` unless the state row still carries our token (1 read).

        Called before effects outside the table (moving files, the report, the email), which
        the transactions' If-Match cannot guard. The token suffices: a newer holder writes a
        higher one, and an older holder cannot write at all (its If-Match fails).
        """
        state = self._read_state()
        token = int(state.get("Token", 0)) if state is not None else None
        if token != self.token:
            raise self._stale(token)

    # -- members ---------------------------------------------------------------------------
    def add(self, member: Member, origin: Provenance) -> None:
        """Write `member` as stated (no history row)."""
        self.put(member, origin)

    def put(
        self,
        member: Member,
        origin: Provenance,
        *,
        key_of_file: str = "",
        base: str = ABSENT,
        event: dict[str, Any] | None = None,
        swept: bool = False,
    ) -> None:
        """Queue the member's row (and its history row); flushes when a batch is full.
        `swept`: ended because an audit file left it out (marked for a retried sweep)."""
        if self._etag is None:
            raise RuntimeError("FencedMemberWriter.open() was not called")
        entities = [member_entity(self.account, member, self.token, origin,
                                  key_of_file=key_of_file, base=base)]  # fmt: skip
        if swept:
            entities[0]["Swept"] = key_of_file
        if event is not None:
            entities.append({"PartitionKey": self.account, **event, "FencingToken": self.token})
        new = sum(e["RowKey"] not in self._pending for e in entities)
        if len(self._pending) + new > self.batch_size:
            self.flush()
        for entity in entities:
            self._pending[entity["RowKey"]] = entity
        self._cache[entities[0]["RowKey"]] = entities[0]  # what the next record must see
        self._written.add(entities[0]["RowKey"])
        if len(self._pending) >= self.batch_size:
            self.flush()

    def prefetch(self, member_ids: list[str]) -> None:
        """Read these members' rows now, PREFETCH_THREADS at a time, for `prior()`.

        Replaces the previous prefetch; rows this writer `put()` since are served from it
        too, so a record sees what the records before it in the window did."""
        keys = [k for k in dict.fromkeys(map(member_key, member_ids)) if k not in self._pending]
        self._cache = {}
        if self._fresh:
            self._cache = {k: None for k in keys if not self._written.might_contain(k)}
            keys = [k for k in keys if k not in self._cache]
        if keys:
            with ThreadPoolExecutor(PREFETCH_THREADS) as pool:
                self._cache.update(zip(keys, pool.map(self._get_member, keys), strict=True))

    def _get_member(self, key: str) -> Any:
        try:
            return self._table.get_entity(self.account, key)
        except ResourceNotFoundError:
            return None

    def prior(self, member_id: str, key_of_file: str) -> Prior:
        """The member as the next record of file `key_of_file` must see it (0 or 1 read)."""
        key = member_key(member_id)
        entity = self._pending.get(key)
        if entity is None:
            entity = self._cache[key] if key in self._cache else self._get_member(key)
            if entity is None:
                return Prior(None, ABSENT, None)
        if key_of_file and entity.get("FileKey") == key_of_file:
            base = str(entity.get("BaseState") or ABSENT)
            if entity.get("FencingToken") == self.token:
                return Prior(member_from_entity(entity), base, str(entity.get("SourceLocation")))
            return Prior(decode_state(base), base, None)  # an earlier attempt: start over
        stored = member_from_entity(entity)
        return Prior(stored, encode_state(stored), None)

    def active_members_not_in(self, key_of_file: str) -> Iterator[Any]:
        """Member rows still active that file `key_of_file` did not write, and those an
        earlier attempt's sweep of the same file already ended (streamed, 1000 a page)."""
        query = (
            "PartitionKey eq @account and ( ( Status eq 'active' and FileKey ne @file ) "
            "or Swept eq @file )"
        )
        params = {"account": self.account, "file": key_of_file}
        for entity in self._table.query_entities(query, parameters=params):
            if is_member_row(str(entity["RowKey"])):
                yield entity

    def discard(self) -> int:
        """Drop members not yet committed (their file turned out unusable); returns how many."""
        dropped = len(self._pending)
        self._pending.clear()
        self._cache.clear()
        return dropped

    @property
    def pending(self) -> int:
        return len(self._pending)

    def flush(self) -> int:
        """Commit the pending members with the state row; returns how many were written."""
        if not self._pending:
            return 0
        operations: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
            ("upsert", entity, {"mode": UpdateMode.REPLACE}) for entity in self._pending.values()
        ]
        written = sum(is_member_row(str(key)) for key in self._pending)
        state = self._state_entity(rows=self.rows_written + written)
        condition = {
            "mode": UpdateMode.REPLACE,
            "etag": self._etag,
            "match_condition": MatchConditions.IfNotModified,
        }
        operations.append(("update", state, condition))
        try:
            results = self._table.submit_transaction(operations)
        except TableTransactionError as error:
            if _condition_failed(error):
                self._pending.clear()
                raise self._stale(self._current_token()) from None
            raise
        self._etag = results[-1]["etag"]
        self._pending.clear()
        self.rows_written += written
        self.transactions += 1
        return written

    # -- internals -------------------------------------------------------------------------
    def _state_entity(self, rows: int = 0) -> dict[str, Any]:
        return {
            "PartitionKey": self.account,
            "RowKey": STATE_ROW,
            "Token": self.token,
            "RunId": self.run_id,
            "Holder": instance_id(),
            "RowsWritten": rows,
            "UpdatedAt": datetime.now(UTC),
        }

    def _read_state(self) -> Any:
        try:
            return self._table.get_entity(self.account, STATE_ROW)
        except ResourceNotFoundError:
            return None

    def _current_token(self) -> int | None:
        state = self._read_state()
        return int(state.get("Token", 0)) if state is not None else None

    def _stale(self, newer: int | None) -> StaleHolder:
        error = StaleHolder(self.account, self.token, newer)
        log.error("%s (account %s)", error, self.account)
        events.emit(
            "stale_writer",
            warning=True,
            key=LEASE_KEY.format(account=self.account),
            token=self.token,
        )
        return error


def _condition_failed(error: Exception) -> bool:
    code = str(getattr(getattr(error, "error_code", None), "value", None) or "")
    code = code or str(getattr(error, "error_code", "") or "")
    return code in _CONDITION_FAILED or getattr(error, "status_code", None) == 412
