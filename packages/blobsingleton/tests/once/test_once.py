"""@once and its state machine against a real Azurite. Where a test plays another delivery
through a `BlobRecordStore()` (the app's records), the function shares its key (`scope="app"`)."""

from __future__ import annotations

import json
import os
import threading
import time

import azure.functions as func
import pytest
from blobsingleton import AlreadyInProgress, Busy, Mode, PayloadMismatch, once
from blobsingleton._connection import TIME_RESOLUTION
from blobsingleton._once_handler import Decision, OnceHandler
from blobsingleton._speed import forget_known as forget_known_records
from blobsingleton.records import BlobRecordStore, Status
from blobsingleton.testing import crashed_run
from libsupport import queue_client, request_counter


def message(body: dict[str, object], id_: str = "m1") -> func.QueueMessage:
    return func.QueueMessage(id=id_, body=json.dumps(body).encode())


def test_first_delivery_runs_and_duplicates_get_the_stored_result(storage_env: str) -> None:
    calls: list[str] = []

    @once("email-{event_id}")
    def send(msg: func.QueueMessage) -> dict[str, int]:
        calls.append(msg.id or "")
        return {"sent": len(calls)}

    assert send(message({"event_id": "e1"}, "a")) == {"sent": 1}
    assert send(message({"event_id": "e1"}, "b")) == {"sent": 1}
    assert send(message({"event_id": "e2"}, "c")) == {"sent": 2}
    assert calls == ["a", "c"]


def test_cost_first_run_two_requests_duplicate_none_here_two_elsewhere(storage_env: str) -> None:
    @once("cost-{event_id}")
    def work(msg: func.QueueMessage) -> None:
        return None

    work(message({"event_id": "warm"}))  # creates the container
    request_counter.reset()
    work(message({"event_id": "k"}))
    first = request_counter.total()
    request_counter.reset()
    work(message({"event_id": "k"}))
    same_process = request_counter.total()
    forget_known_records()  # another process: it never saw the record
    request_counter.reset()
    work(message({"event_id": "k"}))
    # New keys are created without a read first (create, complete); the process that
    # completed the key answers its duplicates from memory for a while; elsewhere a
    # duplicate's create fails and one read says it is done (once a process sees mostly
    # done keys it reads first: one request).
    assert (first, same_process, request_counter.total()) == (2, 0, 2)


def test_failure_frees_the_key_for_the_next_delivery(storage_env: str) -> None:
    attempts: list[int] = []

    @once("flaky-{event_id}")
    def flaky(msg: func.QueueMessage) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("SendGrid said 503")
        return "ok"

    with pytest.raises(RuntimeError):
        flaky(message({"event_id": "e"}))
    assert flaky(message({"event_id": "e"})) == "ok"
    assert len(attempts) == 2


def test_same_key_with_another_payload_is_reported(storage_env: str) -> None:
    @once("pay-{event_id}", payload=lambda msg: msg.get_body())
    def work(msg: func.QueueMessage) -> None:
        return None

    work(message({"event_id": "e", "to": "a@example.com"}))
    with pytest.raises(PayloadMismatch):
        work(message({"event_id": "e", "to": "b@example.com"}))


def _claim(key: str, timeout: float = 300.0) -> OnceHandler:
    """A live run elsewhere: claimed, and kept alive by its heartbeat until it ends."""
    handler = OnceHandler(BlobRecordStore(), key, in_progress_timeout=timeout)
    assert handler.begin().decision == Decision.EXECUTE
    return handler


def test_a_live_run_keeps_its_key_past_its_timeout_by_heartbeat(storage_env: str) -> None:
    holder = _claim("beat-e", timeout=1.5)
    time.sleep(3.5)  # more than twice the timeout: only the heartbeat keeps the record alive
    rival = OnceHandler(BlobRecordStore(), "beat-e", in_progress_timeout=1.5)
    assert rival.begin().decision == Decision.BUSY
    holder.complete("done")
    assert not holder.lost.is_set()
    assert rival.begin().decision == Decision.STORED


def test_a_run_starts_its_heartbeat_thread_only_when_its_first_beat_is_due(
    storage_env: str,
) -> None:
    def beating(key: str) -> bool:
        return any(t.name == f"once-heartbeat-{key}" for t in threading.enumerate())

    short = _claim("beat-short", timeout=30.0)  # first beat due in 10 s
    assert not beating("beat-short")  # a run ending before then never starts one
    short.complete("done")
    holder = _claim("beat-long", timeout=1.5)
    record = BlobRecordStore().get("beat-long")
    assert record is not None
    deadline = time.monotonic() + 10.0
    while BlobRecordStore().get("beat-long").etag == record.etag:  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "no beat within 10 s"
        time.sleep(0.05)
    assert beating("beat-long")  # the first beat came from the run's own thread
    holder.complete("done")
    assert not beating("beat-long")


def test_a_heartbeat_that_finds_its_record_taken_over_sets_lost(storage_env: str) -> None:
    holder = _claim("lost-e", timeout=1.5)
    record = BlobRecordStore().get("lost-e")
    assert record is not None
    taken = record.with_(owner="someone-else", attempt=2, claim="another delivery's")
    BlobRecordStore().replace(taken, record.etag or "")
    assert holder.lost.wait(5.0)


def test_in_progress_elsewhere_wait_then_fail_so_the_host_retries(storage_env: str) -> None:
    _claim("busy-e")

    @once("busy-{event_id}", busy=Busy.wait(timeout=1.0), scope="app")
    def work(msg: func.QueueMessage) -> None:
        raise AssertionError("must not run while another delivery runs")

    with pytest.raises(AlreadyInProgress):
        work(message({"event_id": "e"}))


def test_in_progress_elsewhere_wait_returns_the_result_when_it_completes(storage_env: str) -> None:
    holder = _claim("wait-e")

    @once("wait-{event_id}", busy=Busy.wait(timeout=10.0), scope="app")
    def work(msg: func.QueueMessage) -> str:
        raise AssertionError("must not run: the other delivery completes")

    import threading

    threading.Timer(1.0, holder.complete, args=("done-by-other",)).start()
    assert work(message({"event_id": "e"})) == "done-by-other"


def test_in_progress_elsewhere_skip(storage_env: str) -> None:
    _claim("skip-e")

    @once("skip-{event_id}", busy=Busy.SKIP, scope="app")
    def work(msg: func.QueueMessage) -> str:
        raise AssertionError("must not run")

    assert work(message({"event_id": "e"})) is None


def test_in_progress_elsewhere_defer_requeues_a_delayed_copy(storage_env: str) -> None:
    os.environ["DEFER_TEST_QUEUE"] = queue_name = f"defer-{os.environ['RUNONCE_CONTAINER'][-10:]}"
    client = queue_client(queue_name)
    client.create_queue()
    _claim("defer-e")

    @once("defer-{event_id}", busy=Busy.defer(queue="%DEFER_TEST_QUEUE%", after=2), scope="app")
    def work(msg: func.QueueMessage) -> str:
        raise AssertionError("must not run")

    original = message({"event_id": "e"})
    assert work(original) is None
    assert list(client.receive_messages()) == []  # invisible for now
    time.sleep(2.5)
    copies = list(client.receive_messages())
    assert [m.content for m in copies] == [original.get_body()]
    assert copies[0].dequeue_count == 1  # a fresh copy: the original's count is not burned


def test_crashed_run_is_retried_after_expiry_at_least_once(storage_env: str) -> None:
    crashed_run(BlobRecordStore(), "alo-e", 1.0)
    time.sleep(1.0 + 2 * TIME_RESOLUTION + 0.2)  # expiry in storage's time: whole seconds

    @once("alo-{event_id}", scope="app")
    def work(msg: func.QueueMessage) -> str:
        return "rerun"

    assert work(message({"event_id": "e"})) == "rerun"
    record = BlobRecordStore().get("alo-e")
    assert record is not None and record.status == Status.COMPLETED and record.attempt == 2


def test_crashed_run_is_never_retried_at_most_once(storage_env: str) -> None:
    crashed_run(BlobRecordStore(), "amo-e", 1.0)
    time.sleep(1.0 + 2 * TIME_RESOLUTION + 0.2)

    @once("amo-{event_id}", mode=Mode.AT_MOST_ONCE, scope="app")
    def work(msg: func.QueueMessage) -> str:
        raise AssertionError("at-most-once must not rerun a crashed run")

    assert work(message({"event_id": "e"})) is None


def test_completed_key_runs_again_after_retention(storage_env: str) -> None:
    runs: list[int] = []

    @once("ret-{event_id}", retention=1.0)
    def work(msg: func.QueueMessage) -> int:
        runs.append(1)
        return len(runs)

    assert work(message({"event_id": "e"})) == 1
    assert work(message({"event_id": "e"})) == 1
    # Retention runs in storage's time, read from whole-second HTTP dates: up to 2 s late.
    time.sleep(1.0 + 2 * TIME_RESOLUTION + 0.2)
    assert work(message({"event_id": "e"})) == 2


def test_async_function_is_run_once(storage_env: str) -> None:
    import asyncio

    calls: list[int] = []

    @once("async-{event_id}")
    async def work(msg: func.QueueMessage) -> int:
        calls.append(1)
        return len(calls)

    async def main() -> list[int]:
        return [await work(message({"event_id": "e"})) for _ in range(3)]

    assert asyncio.run(main()) == [1, 1, 1]


def test_invalid_key_from_user_data_is_refused(storage_env: str) -> None:
    @once("email-{event_id}")
    def work(msg: func.QueueMessage) -> None:
        raise AssertionError("must not run")

    with pytest.raises(ValueError, match="escapes"):
        work(message({"event_id": "../../x"}))
