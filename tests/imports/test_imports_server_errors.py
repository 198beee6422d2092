"""The import's fenced writes when storage answers as Azure does under load (`server_errors`:
a proxy in front of Azurite answering chosen requests 503 ServerBusy unforwarded, or 500
OperationTimedOut / InternalError after they landed).

A members transaction answered 500 after it landed is sent again by the Tables SDK (it
retries a POST on 500 and 503) and the copy fails its If-Match on the fence row: it is read
back by its id and known as ours, every member written once, no stale holder seen. A
checkpoint save answered 500 is known as ours by its write id, and a real newer holder still
fences the older one off.
"""

from __future__ import annotations

import json
import logging
from datetime import date

import pytest

from harness.http_messages import Message
from shared.imports.checkpoint import CheckpointStore
from shared.imports.layout import imports_container
from shared.imports.member_table import FencedMemberWriter, Provenance, StaleHolder
from shared.imports.records import Member
from tests.conftest import ServerErrors
from tests.imports.support import ImportsEnv

KINDS = ["server_busy", "operation_timed_out", "internal_error"]


def _transactions(request: Message) -> bool:
    return request.method == "POST" and request.target.split("?")[0].endswith("/$batch")


def _member(i: int) -> Member:
    return Member(f"M{i:05d}", "Zelda", "Quixote", date(1971, 3, 14), "GOLD",
                  date(2026, 1, 1), None)  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_a_members_transaction_answered_with_an_error_writes_every_member_once(
    server_errors: ServerErrors,
    imports_env: ImportsEnv,
    caplog: pytest.LogCaptureFixture,
    kind: str,
) -> None:
    writer = FencedMemberWriter("acme", 7, "run-1", batch_size=10)  # its table via the proxy
    writer.open()
    server_errors.table.arm(kind, _transactions)
    with caplog.at_level(logging.WARNING, logger="shared.imports"):
        for i in range(25):  # 10 (answered with the error) + 10 + 5
            writer.add(_member(i), Provenance("run-1", "a.csv", f"line {i}"))
        writer.flush()
    assert server_errors.table.armed() == 0
    assert writer.rows_written == 25 and writer.transactions == 3
    assert sorted(imports_env.members("acme")) == [f"M{i:05d}" for i in range(25)]
    assert imports_env.state("acme")["RowsWritten"] == 25
    assert "stale holder" not in caplog.text


@pytest.mark.parametrize("kind", KINDS)
def test_a_checkpoint_save_answered_with_an_error_is_ours_and_a_newer_holder_still_fences(
    server_errors: ServerErrors, imports_env: ImportsEnv, kind: str
) -> None:
    container = imports_container(create=True)  # through the proxy (AzureWebJobsStorage)
    store = CheckpointStore(container, "acme/cp.json", "acme", 3)
    store.claim()
    server_errors.blob.arm(kind, lambda r: r.method == "PUT" and "/acme/cp.json" in r.target)
    store.save({"next_record": 10})
    assert server_errors.blob.armed() == 0
    store.save({"next_record": 20})  # from the ETag that landed
    assert json.loads(container.download_blob("acme/cp.json").readall())["next_record"] == 20
    CheckpointStore(container, "acme/cp.json", "acme", 4).claim()
    with pytest.raises(StaleHolder):
        store.save({"next_record": 30})
