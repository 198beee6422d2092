"""DEFER re-enqueues the invocation's trigger message although the guarded function does not
receive it: the library's worker extension records it, and devhost runs the extension as the
Python worker does (PYTHON_ENABLE_WORKER_EXTENSIONS). Real Azurite, real devhost instance."""

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


def test_defer_re_enqueues_the_trigger_message_the_guarded_function_never_received(
    start_host: Callable[..., Supervisor],
    base_settings: dict[str, str | None],
    storage: StorageHelper,
    records: Records,
) -> None:
    settings = _settings(base_settings, "1")
    queue = str(settings["DEFER_QUEUE"])
    lease = _hold(storage, settings, "defer-k1")  # busy: another instance holds the key
    try:
        host = start_host(settings, app_module="defer_trigger_app")
        storage.queue(queue).send_message(b"k1")
        wait_for(lambda: host.totals().successes.get("take"))  # the busy delivery completed
        first = records.where(function="take")[0]
        assert first["dequeue_count"] == 1
        assert storage.depth(queue) == 1  # the original is deleted; its copy waits
        assert records.where(function="work") == []
    finally:
        lease.release()
    wait_for(lambda: records.where(function="work"), timeout=30)
    takes = records.where(function="take")
    assert [t["key"] for t in takes] == ["k1", "k1"]
    assert takes[1]["id"] != first["id"]  # a new message: the deferred copy, not a retry
    assert takes[1]["dequeue_count"] == 1  # the copy starts afresh (no attempt burnt)
    wait_for(lambda: storage.depth(queue) == 0)


def test_without_worker_extensions_the_app_fails_to_index_naming_the_setting(
    start_host: Callable[..., Supervisor], base_settings: dict[str, str | None]
) -> None:
    """The worker's default on Python 3.10+ (extensions off): a DEFER whose function does not
    take the message could never re-enqueue it, so the app refuses to start, with the setting
    named, instead of failing every busy delivery at once and burning its dequeue count."""
    settings = _settings(base_settings, "0")
    with pytest.raises(InstanceStartError, match="PYTHON_ENABLE_WORKER_EXTENSIONS=1"):
        start_host(settings, app_module="defer_trigger_app")


def test_without_worker_extensions_a_defer_that_takes_the_message_defers(
    start_host: Callable[..., Supervisor],
    base_settings: dict[str, str | None],
    storage: StorageHelper,
    records: Records,
) -> None:
    """The app's own way: the guarded function takes the message, whatever the setting."""
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
