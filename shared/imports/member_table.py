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

Several transactions can be in flight at once (`lanes`, app setting IMPORT_WRITE_LANES,
`config.py`):
lane 0 is fenced by the state row as above, lane i by its own fence row `~state~{i}`, and
a member always goes to the lane its key hashes to, so one member's writes stay in file
order (one transaction in flight per lane). A newer holder's `open()` writes its token into
every fence row before it writes anything, so no transaction of an older holder can land
after the first of the newer one.

A transaction whose answer is lost (the connection broke after the request left, or
storage answered 500 and the client's retry then met our own landed ETag) is not taken
for a newer holder: every fence row a transaction writes carries the transaction's own id
(`Batch`), so reading the row back tells "ours landed" (carry on with its ETag) from "a
newer token is there" (stale) from "nothing landed" (sent again, same id, up to RESENDS
times). Whichever copy lands first wins; the other fails its If-Match as a whole.

A member row also remembers the file version that last wrote it (`FileKey`), the state the
member had before that file (`BaseState`), where the chunk of records that wrote it
started (`ChunkStart`, a record number) and the member's state before that chunk
(`ChunkBase`). An import resumed from a checkpoint at record R (`resume_from`) trusts rows
its file wrote in chunks before R, and starts a member an attempt it replaced wrote at or
after R (rows committed after the last checkpoint) again from `ChunkBase`, so the history
and the counts come out as if the file had been read once.

Member rows are read ahead a window of records at a time (`prefetch`): one range query
over the window's keys when the file comes in key order (the rows it returns are the
window's, or few more), else point reads in parallel.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import time
import uuid
import zlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import (
    AzureError,
    IncompleteReadError,
    ResourceExistsError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.data.tables import UpdateMode
from blobsingleton import events
from blobsingleton.leases import instance_id

from shared import settings, storage
from shared.imports.config import MAX_LANES
from shared.imports.duplicates import IdFilter
from shared.imports.keys import LEASE_KEY
from shared.imports.records import ACTIVE, Coverage, Member
from shared.imports.table_batch import submit_replace
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
#: A range query that returns more than this many rows per key wanted is not worth it:
#: later windows read point by point (the file is not in key order).
RANGE_ROWS_PER_KEY = 3
_CONDITION_FAILED = frozenset({"UpdateConditionNotSatisfied", "ConditionNotMet"})
#: A transaction whose outcome is unknown (connection broken, 500/503/504) and that did not
#: land is sent again this many times, RESEND_DELAY_S, then twice, four times that apart.
RESENDS = 3
RESEND_DELAY_S = 0.25
_UNKNOWN_OUTCOME_STATUS = frozenset({500, 503, 504})


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


def _lane_row(lane: int) -> str:
    return STATE_ROW if lane == 0 else f"{STATE_ROW}~{lane}"


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
    kind: str = ""  # csv | x12-834 | database ("" on rows written before kinds were kept)


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
    chunk_base: str = ABSENT


class FencedMemberWriter:
    """Writes one account's members under fencing token `token`; `open()` before `add()`.

    `lanes`: transactions in flight at once (each fenced by its own row); `resume_from`:
    the record number the current file resumed at (see the module docstring);
    `chunk_start`: the record number the chunk being written started at (`start_chunk`).
    """

    def __init__(
        self,
        account: str,
        token: int,
        run_id: str,
        *,
        table: Any = None,
        batch_size: int = MEMBERS_PER_TRANSACTION,
        lanes: int = 1,
    ) -> None:
        if not 1 <= batch_size <= MEMBERS_PER_TRANSACTION:
            raise ValueError(f"batch_size must be 1..{MEMBERS_PER_TRANSACTION}")
        if not 1 <= lanes <= MAX_LANES:
            raise ValueError(f"lanes must be 1..{MAX_LANES}")
        self.account = account
        self.token = token
        self.run_id = run_id
        self.batch_size = batch_size
        self.lanes = lanes
        self._table = table if table is not None else members_table()
        self._etags: list[str | None] = [None] * lanes
        self._pending: list[dict[str, dict[str, Any]]] = [{} for _ in range(lanes)]
        self._pending_rows = 0
        # submitted, not yet known committed: (lane) -> (future, its entities by RowKey)
        self._inflight: list[tuple[Future[Any], dict[str, dict[str, Any]]] | None] = [None] * lanes
        self._pool = ThreadPoolExecutor(lanes, thread_name_prefix="members") if lanes > 1 else None
        self._cache: dict[str, Any] = {}  # prefetched member rows (None: not there)
        # An account with no members when this writer opened has only the rows it writes:
        # a member it has not written (the filter says "certainly not") needs no read.
        self._fresh = False
        self._written = IdFilter()
        self._range_reads = True  # until a range query shows the file is not in key order
        # dependents' rows by subscriber (`dependents_of`), read in this prefetch window
        self._families: dict[str, dict[str, Any]] = {}
        self._written_families = IdFilter(bits=1024 * 1024)
        self.resume_from = 0
        self.chunk_start = 0
        self.rows_written = 0
        self.transactions = 0
        self.reads = 0  # read requests for member rows (range queries count one per page)
        self._count_lock = threading.Lock()

    # -- the fence -----------------------------------------------------------------------------
    def open(self) -> None:
        """Put our token into the state row, then into every lane's fence row (refusing if a
        higher one is there), so no older holder's transaction can land after ours."""
        for lane in range(self.lanes):
            self._etags[lane] = self._open_lane(lane)
        self._fresh = self._no_members()

    def _open_lane(self, lane: int) -> str:
        row = _lane_row(lane)
        for _ in range(5):
            state = self._read_state(row)
            if state is None:
                try:
                    result = self._table.create_entity(self._state_entity(row=row))
                except ResourceExistsError:
                    continue  # another holder created it first: read it again
                except ResourceNotFoundError:
                    with contextlib.suppress(ResourceExistsError):
                        self._table.create_table()  # first import ever: no table yet
                    continue
                return str(result["etag"])
            if int(state.get("Token", 0)) > self.token:
                raise self._stale(int(state["Token"]))
            try:
                result = self._table.update_entity(
                    self._state_entity(row=row, rows=int(state.get("RowsWritten", 0) or 0)),
                    mode=UpdateMode.REPLACE,
                    etag=state.metadata["etag"],
                    match_condition=MatchConditions.IfNotModified,
                )
            except Exception as error:
                if _condition_failed(error):
                    continue  # someone wrote in between: decide again on what is there now
                raise
            return str(result["etag"])
        raise self._stale(self._current_token())

    def _no_members(self) -> bool:
        """True when the account has no member rows yet (asked once, after our token is in
        the fence rows, so no older holder can add any later)."""
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

    def start_chunk(self, record: int) -> None:
        """The records from number `record` on are a new chunk (after a checkpoint)."""
        self.chunk_start = record

    def put(
        self,
        member: Member,
        origin: Provenance,
        *,
        key_of_file: str = "",
        base: str = ABSENT,
        event: dict[str, Any] | None = None,
        swept: bool = False,
        chunk_base: str | None = None,
    ) -> None:
        """Queue the member's row (and its history row); a lane's batch goes out when full.
        `swept`: ended because an audit file left it out (marked for a retried sweep).
        `chunk_base`: the member's state before this chunk (`Prior.chunk_base`)."""
        if self._etags[0] is None:
            raise RuntimeError("FencedMemberWriter.open() was not called")
        entity = member_entity(self.account, member, self.token, origin,
                               key_of_file=key_of_file, base=base)  # fmt: skip
        entity["ChunkStart"] = self.chunk_start
        entity["ChunkBase"] = chunk_base if chunk_base is not None else base
        if swept:
            entity["Swept"] = key_of_file
        entities = [entity]
        if event is not None:
            entities.append({"PartitionKey": self.account, **event, "FencingToken": self.token})
        key = str(entity["RowKey"])
        lane = self._lane_of(key)
        pending = self._pending[lane]
        new = sum(e["RowKey"] not in pending for e in entities)
        if len(pending) + new > self.batch_size:
            self._submit(lane)
            pending = self._pending[lane]
        for item in entities:
            self._pending_rows += item["RowKey"] not in pending
            pending[item["RowKey"]] = item
        self._cache[key] = entity  # what the next record must see
        self._written.add(key)
        if not member.subscriber and member.subscriber_id:
            family = _family_prefix(member.subscriber_id)
            self._written_families.add(family)
            if family in self._families:
                self._families[family][key] = entity
        if len(pending) >= self.batch_size:
            self._submit(lane)

    def _lane_of(self, key: str) -> int:
        if self.lanes == 1:
            return 0
        return zlib.crc32(key.encode("utf-8", "surrogatepass")) % self.lanes

    def prefetch(self, member_ids: list[str]) -> None:
        """Read these members' rows now, for `prior()`: one range query over their keys
        while the file comes in key order, else PREFETCH_THREADS point reads at a time.

        Replaces the previous prefetch; rows this writer `put()` since are served from it
        too, so a record sees what the records before it in the window did."""
        keys = [k for k in dict.fromkeys(map(member_key, member_ids)) if self._unsent(k) is None]
        self._cache = {}
        self._families = {}
        if self._fresh:
            self._cache = {k: None for k in keys if not self._written.might_contain(k)}
            keys = [k for k in keys if k not in self._cache]
        if not keys:
            return
        if self._range_reads and len(keys) > 1:
            found = self._range(sorted(keys))
            if found is not None:
                self._cache.update({k: found.get(k) for k in keys})
                return
        with ThreadPoolExecutor(PREFETCH_THREADS) as pool:
            self._cache.update(zip(keys, pool.map(self._get_member, keys), strict=True))
        self.reads += len(keys)

    def _range(self, keys: list[str]) -> dict[str, Any] | None:
        """The rows of `keys` (sorted) by one range query; None (and no more range queries)
        when the range holds many more rows than keys."""
        query = "PartitionKey eq @account and RowKey ge @low and RowKey le @high"
        params = {"account": self.account, "low": keys[0], "high": keys[-1]}
        limit = RANGE_ROWS_PER_KEY * len(keys) + 100
        wanted = set(keys)
        found: dict[str, Any] = {}
        pages = self._table.query_entities(query, parameters=params, results_per_page=1000)
        seen = 0
        for page in pages.by_page():
            self.reads += 1
            for entity in page:
                seen += 1
                if entity["RowKey"] in wanted:
                    found[entity["RowKey"]] = entity
            if seen > limit:
                self._range_reads = False
                log.info("import %s: member rows read point by point (the file is not in "
                         "key order)", self.account)  # fmt: skip
                return None
        return found

    def dependents_of(self, subscriber_id: str) -> list[Any]:
        """The rows of `subscriber_id`'s dependents whose ids start with "{subscriber id}-"
        (the ids `dependents.py` derives, and the "{REF*0F}-{INS02}" ids older versions
        gave dependents without an id of their own), as the next record must see them: one
        range query per subscriber and prefetch window (none in an account that had no
        members when this writer opened and to which it wrote none of them), this writer's
        rows not yet committed laid over it."""
        family = _family_prefix(subscriber_id)
        rows = self._families.get(family)
        if rows is None:
            rows = {}
            if not self._fresh or self._written_families.might_contain(family):
                query = "PartitionKey eq @account and RowKey ge @low and RowKey lt @high"
                high = family[:-1] + chr(ord(family[-1]) + 1)
                params = {"account": self.account, "low": family, "high": high}
                pages = self._table.query_entities(query, parameters=params)
                for page in pages.by_page():
                    self.reads += 1
                    rows.update((str(e["RowKey"]), e) for e in page)
            self._families[family] = rows
        merged = dict(rows)
        for lane in range(self.lanes):
            inflight = self._inflight[lane]
            for source in (inflight[1] if inflight is not None else {}, self._pending[lane]):
                merged.update((k, e) for k, e in source.items() if k.startswith(family))
        wanted = subscriber_id.strip()
        return [e for k, e in merged.items() if is_member_row(k) and not e.get("Subscriber", True)
                and str(e.get("SubscriberId") or "").strip() == wanted]  # fmt: skip

    def _get_member(self, key: str) -> Any:
        try:
            return self._table.get_entity(self.account, key)
        except ResourceNotFoundError:
            return None

    def _unsent(self, key: str) -> dict[str, Any] | None:
        """Our latest row for `key` not known to be committed (pending or in flight)."""
        lane = self._lane_of(key)
        entity = self._pending[lane].get(key)
        if entity is None and self._inflight[lane] is not None:
            entity = self._inflight[lane][1].get(key)  # type: ignore[index]
        return entity

    def prior(self, member_id: str, key_of_file: str) -> Prior:
        """The member as the next record of file `key_of_file` must see it (0 or 1 read)."""
        key = member_key(member_id)
        entity = self._unsent(key)
        if entity is None:
            entity = self._cache[key] if key in self._cache else self._get_member(key)
            if entity is None:
                return Prior(None, ABSENT, None)
        if key_of_file and entity.get("FileKey") == key_of_file:
            base = str(entity.get("BaseState") or ABSENT)
            start = int(entity.get("ChunkStart", 0) or 0)
            ours = entity.get("FencingToken") == self.token
            if ours or start < self.resume_from:  # this attempt's, or before the checkpoint
                member = member_from_entity(entity)
                same_chunk = ours and start == self.chunk_start
                if same_chunk:
                    chunk_base = str(entity.get("ChunkBase") or base)
                else:
                    chunk_base = encode_state(member)
                return Prior(member, base, str(entity.get("SourceLocation")), chunk_base)
            # committed after the checkpoint by an attempt that did not get to the next one
            chunk_base = str(entity.get("ChunkBase") or base)
            return Prior(decode_state(chunk_base), base, None, chunk_base)
        stored = member_from_entity(entity)
        state = encode_state(stored)
        return Prior(stored, state, None, state)

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
        """Drop members not yet committed (their file turned out unusable); returns how many.
        Transactions already in flight are waited for (they may land)."""
        dropped = self._pending_rows
        self._wait_all(raise_errors=False)
        self._pending = [{} for _ in range(self.lanes)]
        self._pending_rows = 0
        self._cache.clear()
        return dropped

    @property
    def pending(self) -> int:
        return self._pending_rows

    def flush(self) -> int:
        """Commit every pending member (all lanes) and wait for every transaction in flight;
        returns how many member rows were written by this call's transactions."""
        before = self.rows_written
        for lane in range(self.lanes):
            self._submit(lane)
        self._wait_all()
        return self.rows_written - before

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    # -- transactions ------------------------------------------------------------------------
    def _submit(self, lane: int) -> None:
        """Send the lane's pending rows (after its previous transaction is done)."""
        pending = self._pending[lane]
        if not pending:
            return
        self._wait(lane)
        self._pending[lane] = {}
        self._pending_rows -= len(pending)
        if self._pool is None:
            self._commit(lane, pending)
            return
        self._inflight[lane] = (self._pool.submit(self._commit, lane, pending), pending)

    def _wait(self, lane: int, *, raise_errors: bool = True) -> None:
        inflight = self._inflight[lane]
        if inflight is None:
            return
        self._inflight[lane] = None
        try:
            inflight[0].result()
        except StaleHolder:
            if raise_errors:
                raise
        except Exception:
            if raise_errors:
                raise

    def _wait_all(self, *, raise_errors: bool = True) -> None:
        errors: list[BaseException] = []
        for lane in range(self.lanes):
            try:
                self._wait(lane, raise_errors=raise_errors)
            except Exception as error:
                errors.append(error)
        if errors:
            stale = [e for e in errors if isinstance(e, StaleHolder)]
            raise stale[0] if stale else errors[0]

    def _commit(self, lane: int, pending: dict[str, dict[str, Any]]) -> None:
        """One fenced transaction: the rows plus the lane's fence row, If-Match (built and
        read by `table_batch`, not the SDK's multipart code: a tenth of the client CPU).

        When its outcome is unknown, the fence row is read back: the transaction's id there
        means it landed; otherwise it is sent again (see the module docstring)."""
        written = sum(is_member_row(str(key)) for key in pending)
        row = _lane_row(lane)
        batch = uuid.uuid4().hex
        state = self._state_entity(row=row, rows=self.rows_written + written, batch=batch)
        operations: list[tuple[dict[str, Any], str | None]] = [(e, None) for e in pending.values()]
        operations.append((state, self._etags[lane]))
        for attempt in range(RESENDS + 1):
            try:
                self._etags[lane] = submit_replace(self._table, operations)[-1]
                break
            except AzureError as error:
                refused = _condition_failed(error)
                if not (refused or _unknown_outcome(error)):
                    raise
                landed = self._landed(row, batch)  # StaleHolder when a newer token is there
                if landed is not None:
                    self._etags[lane] = landed
                    break
                if refused:
                    raise self._stale(self._current_token()) from None
                if attempt == RESENDS:
                    raise
                log.warning(
                    "account %s: a members transaction (%d rows) met %s and did not land; "
                    "sending it again (%d of %d)",
                    self.account, len(pending), type(error).__name__, attempt + 1, RESENDS,
                )  # fmt: skip
                time.sleep(RESEND_DELAY_S * 2**attempt)
        with self._count_lock:
            self.rows_written += written
            self.transactions += 1

    def _landed(self, row: str, batch: str) -> str | None:
        """The fence row's ETag when transaction `batch` is the last one written there; None
        when it is not (and no newer holder's token is there: that raises StaleHolder)."""
        state = self._read_state(row)
        if state is None:
            return None
        if state.get("Batch") == batch:
            return str(state.metadata["etag"])
        if int(state.get("Token", 0)) > self.token:
            raise self._stale(int(state["Token"]))
        return None

    # -- internals -------------------------------------------------------------------------
    def _state_entity(self, rows: int = 0, row: str = STATE_ROW, batch: str = "") -> dict[str, Any]:
        return {
            "PartitionKey": self.account,
            "RowKey": row,
            "Token": self.token,
            "Batch": batch,
            "RunId": self.run_id,
            "Holder": instance_id(),
            "RowsWritten": rows,
            "UpdatedAt": datetime.now(UTC),
        }

    def _read_state(self, row: str = STATE_ROW) -> Any:
        try:
            return self._table.get_entity(self.account, row)
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


def _family_prefix(subscriber_id: str) -> str:
    """The RowKey prefix of a subscriber's dependents identified by `dependents.py`."""
    return member_key(subscriber_id.strip() + "-")


def _unknown_outcome(error: Exception) -> bool:
    """The transaction may or may not have landed: the connection broke, or storage answered
    a 500/503/504 (after the client's own retries)."""
    if isinstance(error, ServiceRequestError | ServiceResponseError | IncompleteReadError):
        return True
    return getattr(error, "status_code", None) in _UNKNOWN_OUTCOME_STATUS


def _condition_failed(error: Exception) -> bool:
    code = str(getattr(getattr(error, "error_code", None), "value", None) or "")
    code = code or str(getattr(error, "error_code", "") or "")
    return code in _CONDITION_FAILED or getattr(error, "status_code", None) == 412
