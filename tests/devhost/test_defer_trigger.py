"""DEFER re-enqueues the invocation's queue message, which the guarded function takes, whatever
the worker's settings (PYTHON_ENABLE_WORKER_EXTENSIONS off, its default on Python 3.10+); a
DEFER whose function can never take it stops the app at indexing. Real Azurite, real devhost."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from blobsingleton import BlobLease
from devhost_testkit import Records, StorageHelper, wait_for

from devhost.supervisor import InstanceStartError, Supervisor


def _settings(base: dict[str, str | None], enabled: str) -> dict[str, str | None]:
    queue = f"defer-{base['SAMPLE_QUEUE']}"
    return {**base, "DEFER_QUEUE": queue, "PYTHON_ENABLE_WORKER_EXTENSIONS": enabled}


def _hold(storage: StorageHelper, settings: dict[str, Any], key: str) -> BlobLease:
    locks = storage.blobs.get_container_client(settings["LEASE_CONTAINER"])
    if not locks.exists():
        locks.create_container()
    lease = BlobLease(key, container=locks, namespace=settings["AzureFunctionsWebHost__hostid"])
    assert lease.acquire(blocking=False)
    return lease


def test_a_defer_whose_function_cannot_take_the_message_stops_the_app_at_indexing(
    start_host: Callable[..., Supervisor], base_settings: dict[str, str | None]
) -> None:
    """It could never re-enqueue anything: the app refuses to start, saying what to pass,
    instead of failing every busy delivery at once and burning its dequeue count."""
    settings = _settings(base_settings, "1")  # even with the worker's extensions on
    with pytest.raises(InstanceStartError, match=r"pass the func\.QueueMessage"):
        start_host(settings, app_module="defer_trigger_app")


def test_a_defer_re_enqueues_the_message_with_the_workers_default_settings(
    start_host: Callable[..., Supervisor],
    base_settings: dict[str, str | None],
    storage: StorageHelper,
    records: Records,
) -> None:
    """Extensions off, as the worker runs Python 3.10+ by default: the copy is enqueued, the
    original completes, no attempt is burnt."""
    settings = {**_settings(base_settings, "0"), "DEFER_TAKES_MESSAGE": "1"}
    queue = str(settings["DEFER_QUEUE"])
    lease = _hold(storage, settings, "defer-k2")
    try:
        host = start_host(settings, app_module="defer_trigger_app")
        storage.queue(queue).send_message(b"k2")
        wait_for(lambda: host.totals().successes.get("take"))  # deferred: completed, no failure
        assert host.totals().failures == {} or not any(host.totals().failures.values())
        assert storage.depth(queue) == 1 and records.where(function="work") == []
    finally:
        lease.release()
    wait_for(lambda: records.where(function="work"), timeout=30)
    assert [t["dequeue_count"] for t in records.where(function="take")] == [1, 1]
