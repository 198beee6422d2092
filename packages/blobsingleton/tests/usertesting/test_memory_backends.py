"""A user unit-tests their own decorated functions with `blobsingleton.testing`: no storage.

Nothing here reaches Azurite or reads a storage setting: `AzureWebJobsStorage` is removed, so
a call that went to Blob Storage would fail with `SettingMissing`.
"""

from __future__ import annotations

import time

import pytest
from blobsingleton import Busy, LeaseLost, Mode, current_lease, current_run, once, singleton
from blobsingleton.errors import RunLost
from blobsingleton.records import Record, Status
from blobsingleton.testing import memory_backends

sent: list[str] = []


@once("email-{event_id}", busy=Busy.SKIP)
def notify(event_id: str) -> None:
    current_run().ensure_held()
    sent.append(event_id)


@singleton("import-{account}", busy=Busy.SKIP)
def import_account(account: str) -> int:
    return current_lease().token


@pytest.fixture(autouse=True)
def no_storage(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AzureWebJobsStorage", "AzureWebJobsStorage__accountName"):
        monkeypatch.delenv(name, raising=False)
    sent.clear()


def test_a_once_function_runs_once_per_key_in_memory_in_milliseconds() -> None:
    started = time.perf_counter()
    with memory_backends() as memory:
        notify("e1")
        notify("e1")
        notify("e2")
        assert memory.records_of(notify).records["email-e1"].status == Status.COMPLETED
    assert sent == ["e1", "e2"]
    assert time.perf_counter() - started < 1.0


def test_retention_and_crash_recovery_follow_the_fake_clock() -> None:
    with memory_backends() as memory:

        @once("job-{n}", retention=60)
        def job(n: int) -> None:
            sent.append(f"job-{n}")

        job(1)
        memory.clock.advance(30)
        job(1)
        memory.clock.advance(31)
        job(1)  # retention over: runs again
    assert sent == ["job-1", "job-1"]


def test_a_takeover_is_seen_by_ensure_held() -> None:
    with memory_backends() as memory:

        @once("report-{day}", in_progress_timeout=15, mode=Mode.AT_LEAST_ONCE)
        def report(day: str) -> None:
            records = memory.records_of(report).records
            # Another delivery took the key over (the record changed under this run).
            records[f"report-{day}"] = records[f"report-{day}"].with_(etag='"o"', claim="other")
            current_run()._beat_step()  # the heartbeat finds it
            current_run().ensure_held()

        with pytest.raises(RunLost):
            report("mon")


def test_a_singleton_function_takes_a_fenced_lease_in_memory() -> None:
    with memory_backends() as memory:
        assert import_account("acme") == 1
        assert import_account("acme") == 2  # every acquisition a higher token
        memory.locks.acquire(memory.lock_name(import_account, "import-acme"), "someone", 15.0)
        assert import_account("acme") is None  # busy: skipped
        assert not memory.locks.leased(memory.lock_name(import_account, "import-other"))


def test_a_lost_singleton_lease_is_raised_after_the_function() -> None:
    with memory_backends() as memory:

        @singleton("sync-{name}")
        def sync(name: str) -> None:
            memory.locks.break_lease(memory.lock_name(sync, "sync-a"))
            memory.clock.advance(16)  # a whole period with no confirmed renewal

        with pytest.raises(LeaseLost):
            sync("a")


def test_under_a_lease_a_crashed_runs_record_is_taken_over_at_once() -> None:
    with memory_backends() as memory:

        @singleton("night-{day}", scope="app")
        @once("night-{day}", scope="app")
        def night(day: str) -> None:
            sent.append(day)

        crashed = memory.records.put_if_absent(  # an earlier holder's (token 0) run
            Record(
                key="night-mon",
                status=Status.IN_PROGRESS,
                expires_at=0.0,
                started_at=0.0,
                ttl=3600.0,
                lease="night-mon",
                token=0,
            )
        )
        assert crashed.status == Status.IN_PROGRESS
        night("mon")  # no timeout to wait out: the lease holder takes it over
        assert sent == ["mon"]
        assert memory.records.records["night-mon"].attempt == 2
