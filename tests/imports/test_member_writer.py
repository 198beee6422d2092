"""Fenced member writes on Azurite: 99 members + the state row per transaction, If-Match."""

from __future__ import annotations

import logging
import os
from datetime import date

import pytest
from azure.data.tables import TableServiceClient

from devhost.request_counting import RequestCounter
from shared.imports.member_table import FencedMemberWriter, Provenance, StaleHolder, table_name
from shared.imports.records import Member
from tests.imports.support import ImportsEnv


def member(i: int) -> Member:
    return Member(f"M{i:05d}", "Zelda", "Quixote", date(1971, 3, 14), "GOLD",
                  date(2026, 1, 1), None)  # fmt: skip


def write(writer: FencedMemberWriter, numbers: range) -> None:
    for i in numbers:
        writer.add(member(i), Provenance("run-1", "a.csv", f"line {i}"))
    writer.flush()


def test_members_go_99_per_transaction_with_the_state_row(imports_env: ImportsEnv) -> None:
    # the writer's own client counted: a lease another test left renewing in this process
    # sends its PUTs through the shared counter meanwhile
    counter = RequestCounter()
    service = TableServiceClient.from_connection_string(
        os.environ["AzureWebJobsStorage"], raw_request_hook=counter
    )
    writer = FencedMemberWriter("acme", 7, "run-1", table=service.get_table_client(table_name()))
    writer.open()
    counter.reset()
    write(writer, range(250))
    assert writer.transactions == 3  # 99 + 99 + 52
    assert counter.by_method() == {"POST": 3}  # one $batch request each, nothing else
    rows = imports_env.members("acme")
    assert len(rows) == 250
    assert {r["FencingToken"] for r in rows.values()} == {7}
    state = imports_env.state("acme")
    assert (state["Token"], state["RowsWritten"], state["RunId"]) == (7, 250, "run-1")


def test_a_newer_holder_stops_the_older_one_at_its_next_transaction(
    imports_env: ImportsEnv, caplog: pytest.LogCaptureFixture
) -> None:
    older = FencedMemberWriter("acme", 3, "run-1")
    older.open()
    write(older, range(10))
    newer = FencedMemberWriter("acme", 4, "run-1")
    newer.open()  # writes token 4 into the state row: the older writer's ETag is now stale
    with caplog.at_level(logging.ERROR, logger="shared.imports"), pytest.raises(StaleHolder):
        write(older, range(10, 20))
    assert "stale holder: token 3 < 4, stopping" in caplog.text
    rows = imports_env.members("acme")
    assert sorted(rows) == [f"M{i:05d}" for i in range(10)]  # nothing of the failed batch
    write(newer, range(10, 20))
    assert imports_env.state("acme")["Token"] == 4
    with pytest.raises(StaleHolder):
        older.confirm()


def test_an_older_token_cannot_even_open(imports_env: ImportsEnv) -> None:
    FencedMemberWriter("acme", 9, "run-1").open()
    with pytest.raises(StaleHolder, match="token 8 < 9"):
        FencedMemberWriter("acme", 8, "run-1").open()


def test_accounts_are_fenced_independently(imports_env: ImportsEnv) -> None:
    a, b = FencedMemberWriter("a", 1, "r"), FencedMemberWriter("b", 1, "r")
    a.open()
    b.open()
    FencedMemberWriter("a", 2, "r").open()
    write(b, range(5))  # another account's takeover does not touch b's fence
    with pytest.raises(StaleHolder):
        write(a, range(5))
