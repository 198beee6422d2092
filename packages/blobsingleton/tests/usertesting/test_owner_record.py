"""The owner record is where the pages say it is (issue 48, item 8): a `BlobLease` held with
`blocking=False` publishes its owner with its first renewal, a third of the period in, and at
once with `publish_owner_at_acquire=True`; until then `read_lock` shows the lock leased with
no current owner. Against Azurite; the renewal is waited for by polling the lock."""

from __future__ import annotations

import time

from blobsingleton import BlobLease
from blobsingleton.leases import read_lock


def test_a_non_blocking_acquire_publishes_its_owner_with_its_first_renewal(
    storage_env: str,
) -> None:
    lease = BlobLease("owner-later").acquire(blocking=False)
    try:
        state = read_lock("owner-later")
        assert state is not None and state.leased and not state.owner_is_current
        deadline = time.monotonic() + lease.period  # the renewal comes period / 3 in
        while not state.owner_is_current and time.monotonic() < deadline:
            time.sleep(0.2)
            state = read_lock("owner-later")
            assert state is not None
        assert state.owner_is_current and state.owner is not None
        assert state.owner.token == lease.token
    finally:
        lease.release()


def test_publish_owner_at_acquire_publishes_it_at_once(storage_env: str) -> None:
    lease = BlobLease("owner-now", publish_owner_at_acquire=True).acquire(blocking=False)
    try:
        state = read_lock("owner-now")
        assert state is not None and state.owner_is_current
        assert state.owner is not None and state.owner.token == lease.token
    finally:
        lease.release()
