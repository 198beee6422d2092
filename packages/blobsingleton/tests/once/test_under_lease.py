"""`@once` inside a `@singleton` invocation: its record carries the lease's key and fencing
token, and a later holder of that lease takes over a record in progress written under it at
once (its writer lost the lease or died); any other record in progress is decided as before
(issue 40: `under_lease` inferred). Memory backends; the real-process crash is
tests/imports/test_processes.py's.
"""

from __future__ import annotations

import pytest
from blobsingleton import Busy, current_run, once, singleton
from blobsingleton.records import Record, Status
from blobsingleton.testing import MemoryBackends, memory_backends


def _night(runs: list[str]) -> object:
    @singleton("night-{day}", scope="app")
    @once("night-{day}", scope="app", busy=Busy.skip())
    def night(day: str) -> str:
        runs.append(day)
        return f"ran {current_run().token}"

    return night


def _in_progress(memory: MemoryBackends, lease: str, token: int | None) -> Record:
    """A run in progress for an hour, written under `lease` with `token` ("": no lease)."""
    now = memory.clock()
    return memory.records.put_if_absent(
        Record(key="night-mon", status=Status.IN_PROGRESS, started_at=now,
               expires_at=now + 3600, ttl=3600.0, lease=lease, token=token)
    )  # fmt: skip


def test_a_run_under_a_lease_writes_its_key_and_token_into_its_record() -> None:
    with memory_backends() as memory:
        runs: list[str] = []
        assert _night(runs)("mon") == "ran 1"  # type: ignore[operator]
        record = memory.records.records["night-mon"]
    assert (record.lease, record.token, record.status) == ("night-mon", 1, Status.COMPLETED)


def test_a_record_written_under_the_lease_by_an_earlier_holder_is_taken_over_at_once() -> None:
    with memory_backends() as memory:
        _in_progress(memory, "night-mon", 0)  # its holder died an hour before its expiry
        runs: list[str] = []
        assert _night(runs)("mon") == "ran 1"  # type: ignore[operator]
        assert runs == ["mon"] and memory.records.records["night-mon"].attempt == 2


@pytest.mark.parametrize(
    ("lease", "token"),
    [("", None), ("another-lease", 0), ("night-mon", 5)],
    ids=["no lease", "another lease", "a later token"],
)
def test_any_other_record_in_progress_is_busy_until_it_expires(
    lease: str, token: int | None
) -> None:
    with memory_backends() as memory:
        _in_progress(memory, lease, token)
        runs: list[str] = []
        assert _night(runs)("mon") is None  # type: ignore[operator]  # SKIP: busy
        assert runs == [] and memory.records.records["night-mon"].attempt == 1
