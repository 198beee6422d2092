"""`FairLease`, the fair line beside the plain `BlobLease`, against a real Azurite: every time
the line plans with is on the lease's own clock, and nothing of it is set up at import."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
from azure.storage.blob import BlobLeaseClient
from blobsingleton import LeaseTimeout
from blobsingleton import _line as lines
from blobsingleton._blob_lease import WaitingLine
from blobsingleton.leases import FairLease, read_lock
from blobsingleton.testing import FakeClock
from libsupport import blob_service, request_counter


def test_turns_in_a_row_are_counted_on_the_leases_clock(
    storage_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The lease a release keeps is handed on by a timer after KEEP_FOR of real time (30 ms);
    # a longer moment keeps a busy machine from handing it on before the next turn asks.
    monkeypatch.setattr(lines, "KEEP_FOR", 5.0)
    clock = FakeClock()
    key = f"turns-{uuid.uuid4().hex[:8]}"
    holder = FairLease(key, clock=clock).acquire(blocking=False)
    locks = blob_service().get_container_client(os.environ["LEASE_CONTAINER"])
    waiter_id = str(uuid.uuid4())
    WaitingLine(locks, holder.name, key, holder.period).join(waiter_id)  # a waiter in line
    again = FairLease(key, clock=clock)  # this process's next turn

    first = holder.token
    holder.release()  # a waiter behind it: kept for this process's next turn
    again.acquire(blocking=False)  # the kept lease, its token the next (handed on, it would fail)
    assert again.token == first + 1

    clock.advance(lines.TURNS_WITHIN)  # the turns' window has passed, on the lease's clock
    again.release()  # so the release hands the key to the waiter (Change Lease to its id)
    with pytest.raises(LeaseTimeout):
        FairLease(key, clock=clock).acquire(blocking=False)
    handed = BlobLeaseClient(locks.get_blob_client(holder.name), lease_id=waiter_id)
    handed.renew()  # only the lease's holder can renew it: the waiter's id holds it
    handed.release()


def test_nothing_of_the_line_is_registered_when_the_library_is_imported(
    subprocess_env: dict[str, str],
) -> None:
    """Kept leases are handed on at exit (test_fairness.py in the app's tests shows it); the
    hook for that is registered when a process first keeps one, not by importing."""
    code = (
        "import blobsingleton, blobsingleton.leases\n"
        "from blobsingleton import _line, _shutdown\n"
        "print(_line.LineMemory._process is None and not _shutdown._also)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env=subprocess_env, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "True"


def test_a_holder_that_met_no_line_releases_at_once_and_a_turn_right_after_hands_on(
    storage_env: str,
) -> None:
    """What `@singleton` takes (`look_always=False`): an acquisition that met no line releases
    without listing it; the same memory's next turn within `QUIET` may have a line behind it
    that could not take the key in between, so its release lists the line and hands on."""
    clock = FakeClock()
    memory = lines.LineMemory()
    key = f"quiet-{uuid.uuid4().hex[:8]}"
    holder = FairLease(key, clock=clock, memory=memory, look_always=False).acquire(blocking=False)
    locks = blob_service().get_container_client(os.environ["LEASE_CONTAINER"])
    waiter_id = str(uuid.uuid4())
    WaitingLine(locks, holder.name, key, holder.period).join(waiter_id)  # joined while held
    request_counter.reset()
    holder.release()
    assert request_counter.total() == 1  # Release Lease, no listing: the key is free
    state = read_lock(key)
    assert state is not None and state.lease_state == "available"

    again = FairLease(key, clock=clock, memory=memory, look_always=False)
    again.acquire(blocking=False)  # a turn right after: its release looks for a line
    clock.advance(lines.TURNS_WITHIN)  # past the turns in a row: nothing kept for itself
    again.release()  # hands the key to the waiter that joined behind the first holder
    with pytest.raises(LeaseTimeout):
        FairLease(key, clock=clock, memory=lines.LineMemory()).acquire(blocking=False)
    handed = BlobLeaseClient(locks.get_blob_client(holder.name), lease_id=waiter_id)
    handed.renew()  # the waiter's id holds the key
    handed.release()
