"""Members in Table Storage, written in fenced entity group transactions.

Table `Members` (app setting MEMBERS_TABLE): PartitionKey = account, RowKey = member id.
Each account's partition also holds one state row, RowKey "~state" (member ids cannot start
with "~"), carrying the fencing token of the lease holder that last wrote.

Every transaction is up to 99 member upserts plus a REPLACE of the state row with If-Match
on the ETag this writer last saw: the batch is atomic, so members land only if no one else
touched the state row since. A newer lease holder writes its (higher) token into the state
row first, which changes the ETag, so the older holder's next transaction fails as a whole,
and it stops with "stale holder: token N < M, stopping" and writes nothing more. This holds
even when the older holder was paused past its lease and never noticed losing it.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.data.tables import TableTransactionError, UpdateMode
from blobsingleton import events, settings
from blobsingleton.leases import instance_id

from shared import storage
from shared.imports.keys import LEASE_KEY
from shared.imports.records import Member

log = logging.getLogger("shared.imports")

DEFAULT_TABLE = "Members"
STATE_ROW = "~state"
#: Azure's limit is 100 operations per transaction; one of them is the state row.
MEMBERS_PER_TRANSACTION = 99
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


def member_entity(account: str, member: Member, token: int, origin: Provenance) -> dict[str, Any]:
    entity: dict[str, Any] = {
        "PartitionKey": account,
        "RowKey": member.member_id,
        "FirstName": member.first_name,
        "LastName": member.last_name,
        "DateOfBirth": member.date_of_birth.isoformat(),
        "Plan": member.plan,
        "CoverageStart": member.coverage_start.isoformat(),
        "ImportRunId": origin.run_id,
        "SourceFile": origin.source,
        "SourceLocation": origin.location,
        "FencingToken": token,
    }
    if member.coverage_end is not None:
        entity["CoverageEnd"] = member.coverage_end.isoformat()
    return entity


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
            return
        raise self._stale(self._current_token())

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
        if self._etag is None:
            raise RuntimeError("FencedMemberWriter.open() was not called")
        self._pending[member.member_id] = member_entity(self.account, member, self.token, origin)
        if len(self._pending) >= self.batch_size:
            self.flush()

    def imported_at(self, member_id: str, origin: Provenance) -> str | None:
        """Where this writer already imported `member_id` from `origin.source`, else None.

        Exact: the pending batch, else the Members row (1 read) if this run, this source
        file and this token wrote it. Rows from an earlier attempt or file do not count.
        """
        entity = self._pending.get(member_id)
        if entity is None:
            try:
                entity = self._table.get_entity(self.account, member_id)
            except ResourceNotFoundError:
                return None
        same = (
            entity.get("FencingToken") == self.token
            and entity.get("ImportRunId") == origin.run_id
            and entity.get("SourceFile") == origin.source
        )
        return str(entity.get("SourceLocation")) if same else None

    def discard(self) -> int:
        """Drop members not yet committed (their file turned out unusable); returns how many."""
        dropped = len(self._pending)
        self._pending.clear()
        return dropped

    @property
    def pending(self) -> int:
        return len(self._pending)

    def flush(self) -> int:
        """Commit the pending members with the state row; returns how many were written."""
        if not self._pending:
            return 0
        written = len(self._pending)
        operations: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
            ("upsert", entity, {"mode": UpdateMode.REPLACE}) for entity in self._pending.values()
        ]
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
