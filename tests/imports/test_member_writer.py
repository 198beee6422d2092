"""Fenced member writes on Azurite: 99 members + the state row per transaction, If-Match."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from datetime import date
from typing import Any

import pytest
from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.core.pipeline.transport import RequestsTransport
from azure.data.tables import TableServiceClient

from devhost.request_counting import RequestCounter
from shared.imports.member_table import (
    RESENDS,
    FencedMemberWriter,
    Provenance,
    StaleHolder,
    table_name,
)
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


class BatchFaults(RequestsTransport):
    """The real transport to the real Azurite, with one fault on the next `$batch` POSTs:

    "unsent"     the connection fails before the request leaves (nothing lands)
    "lost"       the request lands, its answer is lost (connection reset while reading)
    "twice"      the request is delivered twice (a retry after an answer that never came):
                 the first lands, the caller sees the second's 412
    "newer"      before the request leaves, a newer holder opens the account; then "lost"
    """

    def __init__(self, fault: str, times: int = 1, newer: Callable[[], None] | None = None):
        super().__init__()
        self.fault, self.left, self.newer, self.batches = fault, times, newer, 0

    def send(self, request: Any, **kwargs: Any) -> Any:
        if request.method != "POST" or not request.url.endswith("/$batch"):
            return super().send(request, **kwargs)
        self.batches += 1
        if not self.left:
            return super().send(request, **kwargs)
        self.left -= 1
        if self.fault == "unsent":
            raise ServiceRequestError("connection refused (injected)")
        if self.fault == "newer" and self.newer is not None:
            self.newer()
        answer = super().send(request, **kwargs)
        if self.fault == "twice":
            return super().send(request, **kwargs)
        answer.internal_response.close()
        raise ServiceResponseError("connection reset by peer (injected)")


def faulty_writer(transport: BatchFaults, token: int = 7) -> FencedMemberWriter:
    service = TableServiceClient.from_connection_string(
        os.environ["AzureWebJobsStorage"], transport=transport
    )
    table = service.get_table_client(table_name())
    writer = FencedMemberWriter("acme", token, "run-1", table=table, batch_size=10)
    writer.open()
    return writer


def test_a_transaction_whose_answer_was_lost_counts_once_and_the_next_one_goes_on(
    imports_env: ImportsEnv, caplog: pytest.LogCaptureFixture
) -> None:
    transport = BatchFaults("lost")
    writer = faulty_writer(transport)
    with caplog.at_level(logging.WARNING, logger="shared.imports"):
        write(writer, range(25))  # 10 (answer lost) + 10 + 5
    assert transport.batches == 3  # read back as landed: not sent again
    assert writer.rows_written == 25 and writer.transactions == 3
    assert sorted(imports_env.members("acme")) == [f"M{i:05d}" for i in range(25)]
    assert imports_env.state("acme")["RowsWritten"] == 25
    assert "stale holder" not in caplog.text and "sending it again" not in caplog.text


def test_a_transaction_that_never_left_is_sent_again(
    imports_env: ImportsEnv, caplog: pytest.LogCaptureFixture
) -> None:
    transport = BatchFaults("unsent", times=2)
    writer = faulty_writer(transport)
    with caplog.at_level(logging.WARNING, logger="shared.imports"):
        write(writer, range(15))
    assert transport.batches == 4  # the first transaction sent three times, then the second
    assert sorted(imports_env.members("acme")) == [f"M{i:05d}" for i in range(15)]
    assert caplog.text.count("met ServiceRequestError and did not land; sending it again") == 2
    assert "connection refused" not in caplog.text  # the error's own text (a URL) not logged


def test_a_transaction_that_keeps_failing_gives_up_with_the_error(imports_env: ImportsEnv) -> None:
    transport = BatchFaults("unsent", times=RESENDS + 1)
    writer = faulty_writer(transport)
    with pytest.raises(ServiceRequestError):
        write(writer, range(5))
    assert transport.batches == RESENDS + 1  # sent, then sent again RESENDS times, no more
    assert imports_env.members("acme") == {}


def test_a_transaction_delivered_twice_is_known_as_ours_not_a_newer_holders(
    imports_env: ImportsEnv, caplog: pytest.LogCaptureFixture
) -> None:
    transport = BatchFaults("twice")
    writer = faulty_writer(transport)
    with caplog.at_level(logging.ERROR, logger="shared.imports"):
        write(writer, range(20))  # the second copy of the first transaction fails If-Match
    assert "stale holder" not in caplog.text
    assert sorted(imports_env.members("acme")) == [f"M{i:05d}" for i in range(20)]
    assert imports_env.state("acme")["RowsWritten"] == 20


def test_a_lost_answer_while_a_newer_holder_took_over_stops_the_older(
    imports_env: ImportsEnv,
) -> None:
    transport = BatchFaults("newer", newer=lambda: FencedMemberWriter("acme", 8, "run-1").open())
    writer = faulty_writer(transport)
    with pytest.raises(StaleHolder, match="token 7 < 8"):
        write(writer, range(5))
    assert imports_env.members("acme") == {}  # its If-Match failed: nothing of it landed
    assert transport.batches == 1  # and it was not sent again
