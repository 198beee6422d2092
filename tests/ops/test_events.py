"""One structured record per lease and run-once event, with its dimensions as `extra`."""

from __future__ import annotations

import logging
import shlex
import uuid
from typing import Any

import azure.functions as func
import pytest
from blobsingleton import Busy, once, ops, singleton
from blobsingleton.errors import LeaseLost, StorageUnavailable
from blobsingleton.events import KINDS, emit
from blobsingleton.leases import BaseLease
from blobsingleton.records import Status

from shared.imports.member_table import FencedMemberWriter, StaleHolder
from tests.ops.support import OpsEnv, hold_lock, put_record


class FlakyLease(BaseLease):
    """In memory: the first renewal fails for want of an answer, the second finds it gone."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.renewals = 0

    def _try_acquire(self) -> int | None:
        return 1

    def _renew(self) -> None:
        self.renewals += 1
        if self.renewals == 1:
            raise StorageUnavailable("renew", "connection reset")
        raise LeaseLost(self.key, 1, "LeaseIdMismatchWithLeaseOperation")

    def _release(self) -> None:
        pass


def _events(caplog: pytest.LogCaptureFixture) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for record in caplog.records:
        if record.name == "blobsingleton.events":
            dims = record.custom_dimensions  # type: ignore[attr-defined]
            assert record.event == dims["event"]  # type: ignore[attr-defined]
            found.setdefault(dims["event"], []).append(dims)
    return found


def test_every_kind_of_event_is_one_record_with_its_dimensions(
    ops_env: OpsEnv, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="blobsingleton.events")
    queue = f"defer-{uuid.uuid4().hex[:8]}"
    holder = hold_lock("report-eu", function="daily_report", invocation="inv-9")
    # Renewals come every third of the 15 s period: both leases below wait for theirs at once.
    flaky = FlakyLease("flaky").acquire()

    @singleton("report-{region}", busy=Busy.SKIP, scope="app")
    def skipping(region: str) -> None:
        raise AssertionError("must not run while busy")

    @singleton("report-eu", busy=Busy.defer(queue=queue), scope="app")
    def deferring(msg: func.QueueMessage) -> None:
        raise AssertionError("must not run while busy")

    skipping("eu")
    deferring(func.QueueMessage(id="m-1", body=b'{"region": "eu"}'))
    ops.break_lock("report-eu", "stuck", "ops@test")
    assert holder.lost.wait(timeout=15)  # its next renewal finds the lease broken
    holder.release()
    assert flaky.lost.wait(timeout=15)

    put_record("nightly-2026-11-23", Status.IN_PROGRESS, expires_in=-1)

    @once("nightly-{day}", scope="app")
    def nightly(day: str) -> None:
        pass

    nightly("2026-11-23")  # takes the expired record over, then completes
    nightly("2026-11-23")  # a duplicate: replayed
    ops.reset_run("nightly-2026-11-23", "re-run", "ops@test")

    FencedMemberWriter("acme", 5, "run-1").open()
    older = FencedMemberWriter("acme", 4, "run-1")
    with pytest.raises(StaleHolder):
        older.open()

    events = _events(caplog)
    assert set(events) == KINDS | {"stale_writer"}  # the library's kinds, and the app's own
    for kind, records in events.items():
        assert all(r["instance"] for r in records), kind
    acquire = next(r for r in events["acquire"] if r["key"] == "report-eu")
    assert (acquire["function"], acquire["invocation_id"]) == ("daily_report", "inv-9")
    assert acquire["token"] >= 1
    assert events["busy_skip"][0]["key"] == "report-eu"
    assert events["busy_skip"][0]["function"] == "skipping"
    assert events["defer"][0]["queue"] == queue
    assert events["break"][0]["token"] == acquire["token"]
    lost = {r["key"]: r for r in events["lost"]}
    assert lost["report-eu"]["function"] == "daily_report" and "duration_s" in lost["report-eu"]
    assert events["renewal_failed"][0]["key"] == "flaky"
    assert events["takeover"][0]["key"] == events["completed"][0]["key"] == "nightly-2026-11-23"
    assert events["completed"][0]["duration_s"] >= 0
    assert events["stale_writer"][0] == {**events["stale_writer"][0], "key": "import-acme",
                                         "token": 4}  # fmt: skip
    assert events["reset"][0]["key"] == "nightly-2026-11-23"
    assert events["replay"][0]["key"] == "nightly-2026-11-23"


def test_a_kind_that_is_not_a_name_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="an event kind is lower-case letters"):
        emit("stale writer!", key="x")


def test_an_apps_own_kind_is_logged_at_the_level_it_asks_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="blobsingleton.events")
    emit("export_done", key="e-1")
    emit("export_stuck", warning=True, key="e-2")
    levels = [(r.levelno, r.getMessage().split()[0]) for r in caplog.records]
    assert levels == [(logging.INFO, "event=export_done"), (logging.WARNING, "event=export_stuck")]


def test_the_message_carries_the_dimensions_as_quoted_pairs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="blobsingleton.events")
    emit("break", key="email-1", duration_s=0.123456, reason='hung "since" 02:30', by="a=b")
    [record] = [r for r in caplog.records if r.name == "blobsingleton.events"]
    assert record.custom_dimensions["duration_s"] == 0.123  # type: ignore[attr-defined]
    # the message alone (all the worker forwards by default) holds the same pairs
    pairs = dict(part.split("=", 1) for part in shlex.split(record.getMessage()))
    assert pairs["event"] == "break" and pairs["key"] == "email-1"
    assert pairs["reason"] == 'hung "since" 02:30' and pairs["by"] == "a=b"
    assert pairs["duration_s"] == "0.123" and pairs["instance"]
