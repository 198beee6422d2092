"""Queue trigger semantics against a real Azurite, with the sample app in a worker process."""

from __future__ import annotations

import uuid
from typing import Any

from azure.core.exceptions import HttpResponseError
from devhost_testkit import Records, StorageHelper, wait_for

from devhost.queue_listener import taken_by_another_delivery


def test_a_good_message_runs_once_and_is_deleted(
    start_host: Any, base_settings: dict[str, Any], storage: StorageHelper, records: Records
) -> None:
    queue = base_settings["SAMPLE_QUEUE"]
    host = start_host(base_settings)
    storage.queue(queue).send_message(b"ok-1")

    wait_for(lambda: records.where(function="sample_queue", event="done", body="ok-1"))
    wait_for(lambda: storage.depth(queue) == 0)  # counts invisible messages too: deleted
    host.stop()
    starts = records.where(function="sample_queue", event="start", body="ok-1")
    assert len(starts) == 1 and starts[0]["dequeue_count"] == 1
    assert storage.depth(f"{queue}-poison") == 0
    totals = host.totals()
    assert totals.successes == {"sample_queue": 1}
    assert totals.host_storage_requests > 0


def test_a_failing_message_is_poisoned_after_max_dequeue_count_deliveries(
    start_host: Any, base_settings: dict[str, Any], storage: StorageHelper, records: Records
) -> None:
    queue = base_settings["SAMPLE_QUEUE"]
    host = start_host(base_settings)
    storage.queue(queue).send_message(b"fail-1")

    wait_for(lambda: storage.depth(f"{queue}-poison") == 1)
    wait_for(lambda: storage.depth(queue) == 0)
    host.stop()
    deliveries = records.where(function="sample_queue", event="start", body="fail-1")
    assert [d["dequeue_count"] for d in deliveries] == [1, 2, 3, 4, 5]
    assert storage.peek_bodies(f"{queue}-poison") == [b"fail-1"]
    totals = host.totals()
    assert totals.failures == {"sample_queue": 5}
    assert totals.poisoned == 1


def test_a_raw_message_that_is_not_base64_goes_to_poison_and_the_loop_goes_on(
    start_host: Any, base_settings: dict[str, Any], storage: StorageHelper, records: Records
) -> None:
    queue = base_settings["SAMPLE_QUEUE"]
    host = start_host(base_settings)
    storage.queue(queue, base64_encoded=False).send_message("this is not base64!")

    wait_for(lambda: storage.depth(f"{queue}-poison") == 1)
    storage.queue(queue).send_message(b"ok-after-raw")
    wait_for(lambda: records.where(function="sample_queue", event="done", body="ok-after-raw"))
    wait_for(lambda: storage.depth(queue) == 0)
    host.stop()
    assert storage.peek_bodies(f"{queue}-poison") == [b"this is not base64!"]
    invoked = {r["body"] for r in records.where(function="sample_queue", event="start")}
    assert invoked == {"ok-after-raw"}  # the raw message never reached the function


def test_stopping_lets_an_in_flight_invocation_finish(
    start_host: Any, base_settings: dict[str, Any], storage: StorageHelper, records: Records
) -> None:
    queue = base_settings["SAMPLE_QUEUE"]
    host = start_host(base_settings)
    storage.queue(queue).send_message(b"slow-1")
    wait_for(lambda: records.where(function="sample_queue", event="start", body="slow-1"))

    reports = host.stop()  # SIGTERM while the function sleeps 2 s
    assert records.where(function="sample_queue", event="done", body="slow-1")
    assert storage.depth(queue) == 0  # finished and deleted, not left for a redelivery
    assert reports[0]["final"] is True
    assert reports[0]["successes"] == {"sample_queue": 1}
    assert host.exit_codes() == {0: -9}  # drained, then killed as the host disposes a worker


def test_a_stale_pop_receipt_is_recognised_as_another_delivery_not_a_failure(
    storage: StorageHelper,
) -> None:
    """Delete/release with a pop receipt whose visibility ran out: Azurite says 400
    PopReceiptMismatch (or 404 once deleted); the listener logs it instead of failing."""
    queue = storage.queue(f"stale-{uuid.uuid4().hex[:8]}")
    queue.create_queue()
    queue.send_message(b"m")
    first = queue.receive_message(visibility_timeout=1)
    # Once the first delivery's visibility runs out, another delivery takes the message.
    second = wait_for(lambda: queue.receive_message(visibility_timeout=30), interval=0.2)
    errors = []
    for call in (
        lambda: queue.delete_message(first.id, first.pop_receipt),
        lambda: queue.update_message(first.id, first.pop_receipt, visibility_timeout=0),
    ):
        try:
            call()
        except HttpResponseError as error:
            errors.append(error)
    queue.delete_message(second.id, second.pop_receipt)
    try:
        queue.delete_message(second.id, second.pop_receipt)
    except HttpResponseError as error:
        errors.append(error)
    assert len(errors) == 3 and all(taken_by_another_delivery(e) for e in errors)
    try:
        queue.update_message(second.id, "not-a-receipt", visibility_timeout=-5)
    except HttpResponseError as error:
        assert not taken_by_another_delivery(error), error.error_code
    else:
        raise AssertionError("a negative visibility timeout should be refused")
