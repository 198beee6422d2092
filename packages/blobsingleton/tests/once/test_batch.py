"""Run-once per item of a batch (`fn.each(items)`): each item's work once, completed items
replayed from one listing, the busy policy per item, one item's failure isolated; on Azurite
with Event Hubs events decoded by `azure.functions`' converter (eventhub_batch.py), and batches
raced by real processes. Request counts are every request the library's clients send."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest
from blobsingleton import Busy, BusyPolicy, once
from blobsingleton.errors import AlreadyInProgress, BatchFailed, KeyTemplateError
from blobsingleton.testing import forget_remembered_records, memory_backends
from eventhub_batch import orders
from libsupport import queue_client, request_counter

RACER = str(Path(__file__).with_name("batch_racer.py"))


def charger(runs: Counter[int], **options: Any) -> Any:
    @once("charge-{PartitionId}-{event.sequence_number}", **options)
    def charge(event: func.EventHubEvent) -> dict[str, Any]:
        runs[event.sequence_number] += 1
        return {"charged": json.loads(event.get_body())["order_id"]}

    return charge


def stored(event: func.EventHubEvent) -> dict[str, Any]:
    return {"charged": json.loads(event.get_body())["order_id"]}


def test_a_new_batch_runs_each_item_once_for_at_most_2_2_requests_per_item(
    storage_env: str,
) -> None:
    runs: Counter[int] = Counter()
    charge = charger(runs)
    charge(orders(1, first_sequence=1)[0])  # the container exists: the steady state
    batch = orders(100)
    request_counter.reset()
    result = charge.each(batch)
    requests = request_counter.total()
    assert result.counts() == {"ran": 100}
    assert all(runs[e.sequence_number] == 1 for e in batch)
    assert result.values() == [stored(e) for e in batch]
    assert [r.key for r in result] == [f"charge-0-{e.sequence_number}" for e in batch]
    assert requests <= 220, requests  # the floor is 200: claim and complete each


def test_a_replayed_completed_batch_runs_nothing_and_returns_the_stored_results_in_one_listing(
    storage_env: str,
) -> None:
    runs: Counter[int] = Counter()
    charge = charger(runs)
    batch = orders(100)
    charge.each(batch).raise_if_failed()
    forget_remembered_records()  # as the process a replayed batch lands on would
    request_counter.reset()
    replay = charge.each(orders(100))
    requests = request_counter.by_method()
    assert replay.counts() == {"replayed": 100}
    assert replay.values() == [stored(e) for e in batch]
    assert sum(runs.values()) == 100
    assert requests == {"GET": 1}, requests  # one List Blobs with metadata
    replay.raise_if_failed()  # nothing failed: no raise


def test_a_replayed_batch_with_results_over_4_kb_reads_a_result_only_when_asked(
    storage_env: str,
) -> None:
    runs: Counter[int] = Counter()

    @once("big-{PartitionId}-{event.sequence_number}")
    def report(event: func.EventHubEvent) -> str:
        runs[event.sequence_number] += 1
        return f"{event.sequence_number}:" + "x" * 5000  # a record too large for its metadata

    batch = orders(20)
    report.each(batch).raise_if_failed()
    forget_remembered_records()
    request_counter.reset()
    replay = report.each(batch)
    assert replay.counts() == {"replayed": 20}
    assert request_counter.total() == 1  # the listing says each is completed
    assert "not read yet" in repr(replay[3])
    assert replay[3].value == f"{batch[3].sequence_number}:" + "x" * 5000
    assert request_counter.total() == 2  # that one result, read from its blob
    assert replay.values() == [f"{e.sequence_number}:" + "x" * 5000 for e in batch]
    assert request_counter.total() == 1 + 20
    assert set(runs.values()) == {1}


def test_a_batch_60_of_100_completed_reruns_only_the_40(storage_env: str) -> None:
    runs: Counter[int] = Counter()
    charge = charger(runs)
    batch = orders(100)
    charge.each(batch[:60]).raise_if_failed()
    forget_remembered_records()
    request_counter.reset()
    result = charge.each(batch)
    requests = request_counter.total()
    assert [r.outcome for r in result] == ["replayed"] * 60 + ["ran"] * 40
    assert all(runs[e.sequence_number] == 1 for e in batch)
    assert result.values() == [stored(e) for e in batch]
    assert requests <= 1 + 2 * 40, requests


def test_one_items_failure_runs_the_others_and_frees_only_its_key(storage_env: str) -> None:
    runs: Counter[int] = Counter()
    batch = orders(10)
    broken = {batch[3].sequence_number}

    @once("charge-{PartitionId}-{event.sequence_number}")
    def charge(event: func.EventHubEvent) -> int:
        runs[event.sequence_number] += 1
        if event.sequence_number in broken:
            raise ConnectionError("payment service down")
        return event.sequence_number

    result = charge.each(batch)
    assert [r.outcome for r in result] == ["ran"] * 3 + ["failed"] + ["ran"] * 6
    assert isinstance(result[3].error, ConnectionError)
    assert [r.key for r in result.failed] == [f"charge-0-{batch[3].sequence_number}"]
    with pytest.raises(BatchFailed) as raised:
        result.raise_if_failed()
    assert raised.value.keys == (f"charge-0-{batch[3].sequence_number}",)
    assert raised.value.total == 10
    assert isinstance(raised.value.__cause__, ConnectionError)
    broken.clear()  # redelivered (Service Bus abandons the batch): only the failed one runs
    again = charge.each(batch)
    assert [r.outcome for r in again] == ["replayed"] * 3 + ["ran"] + ["replayed"] * 6
    assert all(runs[e.sequence_number] == (2 if i == 3 else 1) for i, e in enumerate(batch))


class Holder:
    """Runs one item's `@once` call (the app's key) in a thread, in progress until `release`."""

    def __init__(self, template: str) -> None:
        self.started, self.release = threading.Event(), threading.Event()

        @once(template, scope="app")
        def hold(event: func.EventHubEvent) -> str:
            self.started.set()
            self.release.wait(30)
            return "held"

        self.fn = hold

    def start(self, event: func.EventHubEvent) -> threading.Thread:
        thread = threading.Thread(target=self.fn, args=(event,))
        thread.start()
        assert self.started.wait(10)
        return thread


@pytest.mark.parametrize("policy", ["skip", "wait", "callable"])
def test_an_item_in_progress_elsewhere_gets_the_busy_policy(storage_env: str, policy: str) -> None:
    batch = orders(5)
    holder = Holder("charge-{PartitionId}-{event.sequence_number}")
    runs: Counter[int] = Counter()

    chosen: BusyPolicy = {
        "skip": Busy.skip(hold=0.2),
        "wait": Busy.wait(timeout=0.5, hold=0.2),
        "callable": Busy.answer(lambda error: f"busy: {error.key}", hold=0.2),  # type: ignore[attr-defined]
    }[policy]

    @once("charge-{PartitionId}-{event.sequence_number}", scope="app", busy=chosen)
    def charge(event: func.EventHubEvent) -> str:
        runs[event.sequence_number] += 1
        return "charged"

    thread = holder.start(batch[2])
    try:
        result = charge.each(batch)
    finally:
        holder.release.set()
        thread.join()
    busy = result[2]
    assert [r.outcome for i, r in enumerate(result) if i != 2] == ["ran"] * 4
    assert runs[batch[2].sequence_number] == 0
    if policy == "skip":
        assert (busy.outcome, busy.value, busy.error) == ("skipped", None, None)
    elif policy == "wait":
        assert busy.outcome == "busy" and isinstance(busy.error, AlreadyInProgress)
        with pytest.raises(BatchFailed):
            result.raise_if_failed()
    else:
        assert (busy.outcome, busy.value) == ("busy", f"busy: {busy.key}")


def test_an_item_busy_under_wait_is_replayed_once_the_other_run_completes(
    storage_env: str,
) -> None:
    batch = orders(4)
    holder = Holder("charge-{PartitionId}-{event.sequence_number}")

    @once("charge-{PartitionId}-{event.sequence_number}", scope="app", busy=Busy.wait(timeout=30))
    def charge(event: func.EventHubEvent) -> str:
        if event is batch[-1]:
            holder.release.set()  # the run elsewhere finishes while the batch goes on
        return "charged"

    thread = holder.start(batch[0])
    result = charge.each(batch)
    thread.join()
    outcomes = [(r.outcome, r.value) for r in result]
    assert outcomes == [("replayed", "held")] + [("ran", "charged")] * 3


def test_an_item_completed_elsewhere_after_the_listing_still_runs_once(storage_env: str) -> None:
    batch = orders(6)
    runs: Counter[str] = Counter()

    @once("charge-{PartitionId}-{event.sequence_number}", scope="app")
    def elsewhere(event: func.EventHubEvent) -> str:
        runs[f"elsewhere {event.sequence_number}"] += 1
        return "elsewhere"

    @once("charge-{PartitionId}-{event.sequence_number}", scope="app")
    def charge(event: func.EventHubEvent) -> str:
        runs[f"batch {event.sequence_number}"] += 1
        if event is batch[0]:
            elsewhere(batch[4])  # after the batch's listing saw item 4 absent
        return "batch"

    forget_remembered_records()
    result = charge.each(batch)
    assert result[4].outcome == "replayed" and result[4].value == "elsewhere"
    assert f"batch {batch[4].sequence_number}" not in runs
    assert runs[f"elsewhere {batch[4].sequence_number}"] == 1


def test_two_processes_given_the_same_batch_run_every_item_exactly_once(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    out, start, count = tmp_path / "runs.log", tmp_path / "start", 100
    command = [sys.executable, RACER, str(out), str(count), str(start)]
    racers = [
        subprocess.Popen(command, env=subprocess_env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    ready = {Path(f"{start}.{racer.pid}") for racer in racers}
    while not all(path.exists() for path in ready):  # both imported, their batch built
        assert all(racer.poll() is None for racer in racers), "a racer exited before the start"
        time.sleep(0.01)
    start.touch()
    reports = [json.loads(racer.communicate(timeout=120)[0]) for racer in racers]
    assert all(racer.returncode == 0 for racer in racers)
    lines = out.read_text().splitlines()
    executed = Counter(line.split()[0] for line in lines)
    assert len(executed) == count and set(executed.values()) == {1}, executed.most_common(3)
    for report in reports:
        assert report["wrong_values"] == []
        assert set(report["counts"]) <= {"ran", "replayed"}, report
    assert sum(r["counts"].get("ran", 0) for r in reports) == count, reports
    print(reports)


def test_an_item_twice_in_one_batch_runs_once_and_an_empty_batch_runs_nothing(
    storage_env: str,
) -> None:
    runs: Counter[int] = Counter()
    charge = charger(runs)
    batch = orders(3)
    result = charge.each([batch[0], batch[1], batch[0], batch[2]])
    assert [r.outcome for r in result] == ["ran", "ran", "replayed", "ran"]
    assert result[2].value == result[0].value
    assert set(runs.values()) == {1}
    assert len(charge.each([])) == 0
    with pytest.raises(TypeError, match="each"):
        charge.each(batch[0].get_body())  # not a list of items


def test_a_list_given_to_a_once_function_points_to_each(storage_env: str) -> None:
    charge = charger(Counter())
    with pytest.raises(KeyTemplateError, match=r"'event' is a list of 3 items.*each\(event\)"):
        charge(orders(3))


def test_a_list_of_values_beside_the_key_is_not_taken_for_a_batch(storage_env: str) -> None:
    @once("tag-{order.order_id}")
    def tag(order: dict[str, str], tags: list[str]) -> None: ...

    with pytest.raises(KeyTemplateError) as raised:
        tag({"id": "o1"}, ["a", "b"])
    assert "each(" not in str(raised.value)
    assert "has no 'order_id'" in str(raised.value)


def test_an_item_in_progress_elsewhere_is_deferred_when_it_is_a_queue_message(
    storage_env: str,
) -> None:
    os.environ["BATCH_DEFER_QUEUE"] = name = f"batch-{os.environ['RUNONCE_CONTAINER'][-10:]}"
    client = queue_client(name)
    client.create_queue()
    holder = Holder("work-{event.id}")  # the same key as work's
    messages = [func.QueueMessage(id=f"m{i}", body=b'{"n": %d}' % i) for i in range(3)]

    @once("work-{msg.id}", scope="app", busy=Busy.defer(queue="%BATCH_DEFER_QUEUE%", after=30))
    def work(msg: func.QueueMessage) -> str:
        return "worked"

    thread = holder.start(messages[1])
    try:
        result = work.each(messages)
    finally:
        holder.release.set()
        thread.join()
    assert [r.outcome for r in result] == ["ran", "deferred", "ran"]
    assert client.get_queue_properties().approximate_message_count == 1  # invisible for 30 s


def test_each_async_runs_each_item_once_and_replays_a_completed_batch(storage_env: str) -> None:
    runs: Counter[int] = Counter()

    @once("charge-{PartitionId}-{event.sequence_number}")
    async def charge(event: func.EventHubEvent) -> int:
        runs[event.sequence_number] += 1
        await asyncio.sleep(0)
        return event.sequence_number

    batch = orders(20)
    first = asyncio.run(charge.each_async(batch))
    forget_remembered_records()
    request_counter.reset()
    second = asyncio.run(charge.each_async(batch))
    assert first.counts() == {"ran": 20} and second.counts() == {"replayed": 20}
    assert second.values() == [e.sequence_number for e in batch]
    assert request_counter.total() == 1
    assert set(runs.values()) == {1}


def test_an_item_without_its_key_fails_alone() -> None:
    runs: list[str] = []

    @once("charge-{order.order_id}")
    def charge(order: dict[str, str]) -> str:
        runs.append(order["order_id"])
        return "charged"

    with memory_backends():  # a store without get_many: each key looked up alone
        result = charge.each([{"order_id": "a"}, {"order_id": ""}, {"order_id": "c"}])
        again = charge.each([{"order_id": "a"}, {"order_id": "c"}])
    assert [r.outcome for r in result] == ["ran", "failed", "ran"]
    assert isinstance(result[1].error, KeyTemplateError) and result[1].key is None
    assert again.counts() == {"replayed": 2}
    assert runs == ["a", "c"]
