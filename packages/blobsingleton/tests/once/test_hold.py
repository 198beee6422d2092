"""A delivery that finds its key in progress is held in its process, watching the record
(the busy policy's `hold`, `_record_watch.RecordWatch`): released about when the run it waits
for ends, or taken over once a killed run's record expires. Real Azurite, real processes where it
matters.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from azure.storage.blob import ContainerClient
from blobsingleton import Busy, once
from blobsingleton._connection import TIME_RESOLUTION
from blobsingleton._once_handler import Decision, OnceHandler
from blobsingleton._record_watch import MAX_TICK
from blobsingleton._speed import SpeedLayer, forget_known, speed_for
from blobsingleton.records import BlobRecordStore, Record, Status
from blobsingleton.testing import RequestCounter, crashed_run
from libsupport import request_counter

HOLDER = str(Path(__file__).with_name("holder.py"))


def _holder(env: dict[str, str], key: str, timeout: float) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, HOLDER, key, str(timeout)],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "claimed"
    return child


def _busy(error: Exception) -> str:
    return "busy"


def test_a_busy_copy_learns_the_run_finished_within_a_tick_and_gets_its_result(
    subprocess_env: dict[str, str],
) -> None:
    child = _holder(subprocess_env, "sent", 15.0)
    ran: list[str] = []

    @once("hold-{key}", busy=Busy.answer(_busy, hold=20.0), scope="app")
    def work(key: str) -> dict[str, str]:
        ran.append(key)
        return {"by": "copy"}

    result: list[Any] = []
    copy = threading.Thread(target=lambda: result.append(work("sent")))
    copy.start()
    time.sleep(1.0)  # the copy is waiting (backed off to its slowest pace) before the end
    assert copy.is_alive()
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write("done\n")
    child.stdin.flush()
    assert child.stdout.readline().strip() == "completed"
    finished = time.monotonic()
    copy.join(10)
    released_after = time.monotonic() - finished
    assert child.wait(10) == 0
    assert result == [{"by": "holder"}] and ran == []  # the stored result, never run again
    # At its next look (a tick, MAX_TICK at most), not at the end of its 20 s hold or the
    # run's 15 s timeout: ten times what it takes on an idle machine tells them apart.
    assert released_after < 10 * (MAX_TICK + 0.5)


def test_a_copy_waiting_on_a_killed_run_takes_over_once_its_record_expires(
    subprocess_env: dict[str, str],
) -> None:
    timeout = 3.0
    child = _holder(subprocess_env, "killed", timeout)
    ran: list[float] = []

    @once(
        "hold-{key}",
        busy=Busy.answer(_busy, hold=12 * timeout),
        in_progress_timeout=timeout,
        scope="app",
    )
    def work(key: str) -> str:
        ran.append(time.monotonic())
        return "taken over"

    result: list[Any] = []
    copy = threading.Thread(target=lambda: result.append(work("killed")))
    copy.start()
    time.sleep(0.3)
    os.kill(child.pid, signal.SIGKILL)
    killed = time.monotonic()
    child.wait(10)
    copy.join(12 * timeout)
    assert result == ["taken over"]
    # Once the record expires: its in-progress timeout (judged in storage time, whose
    # Last-Modified has whole seconds) plus a tick, about 4 s on an idle machine. How soon is
    # `bench failover`'s claim (`once_kill`); here, within ten timeouts, it is taken over.
    assert ran[0] - killed <= 10 * timeout


def test_a_copy_held_shorter_than_a_killed_run_defers_to_when_the_record_can_expire(
    storage_env: str,
) -> None:
    timeout = 15.0
    store = BlobRecordStore()
    crashed_run(store, "dead", timeout)
    handler = OnceHandler(store, "dead", in_progress_timeout=timeout)
    started = time.monotonic()
    outcome = handler.hold(handler.begin(), 1.0)
    held = time.monotonic() - started
    # Held its 1 s, not less; well under the 15 s the record has left (10 s: ten times 1 s).
    assert outcome.decision == Decision.BUSY and 1.0 <= held < 10.0
    # Re-queued for what is left of the expiry after the hold, not the whole of it again.
    retry_at = started + held + handler.retry_after(outcome.record)
    assert retry_at <= started + timeout + TIME_RESOLUTION + 1.5


def test_one_request_per_tick_for_every_key_waiting_in_the_process(storage_env: str) -> None:
    store = BlobRecordStore()
    keys = [f"wait-{i:02d}" for i in range(16)]
    claims = {key: crashed_run(store, key, 60.0) for key in keys}
    released: list[bool] = []
    waiting = threading.Barrier(len(keys) + 1)

    def wait(key: str) -> None:
        waiting.wait()
        changed, record = store.watch(key, claims[key].etag, time.monotonic() + 20)
        released.append(changed and record is not None and record.status == Status.COMPLETED)

    threads = [threading.Thread(target=wait, args=(key,)) for key in keys]
    for thread in threads:
        thread.start()
    waiting.wait()
    time.sleep(0.5)  # every key is being watched
    request_counter.reset()
    started = time.monotonic()
    for key in keys:
        done = claims[key].with_(status=Status.COMPLETED, result=key, ttl=600.0)
        store.replace(done, claims[key].etag or "")
    for thread in threads:
        thread.join(20)
    elapsed = time.monotonic() - started
    assert released == [True] * len(keys)
    looks = request_counter.by_method().get("GET", 0)
    # A read per key and tick would be 16 per tick; one listing covers all sixteen.
    assert looks < len(keys)
    assert looks <= elapsed / 0.01 + 1  # never more than one request per tick


def test_first_looks_at_the_same_moment_share_one_listing(storage_env: str) -> None:
    store = BlobRecordStore(scope=f"looks-{uuid.uuid4().hex[:8]}")  # a speed layer of its own
    now = time.time()
    store.put_if_absent(
        Record(key="seen-00", status=Status.COMPLETED, expires_at=now + 60, started_at=now,
               ttl=60.0)
    )  # fmt: skip
    layer = _layer(store)
    layer.engaged, layer.completed = True, 1.0  # first looks here find keys done: look first
    forget_known()
    request_counter.reset()
    start = threading.Barrier(16)
    found: dict[str, Record | None] = {}

    def create(i: int) -> None:
        key = f"seen-{i:02d}"
        start.wait()
        if (before := layer.before_create(key)) is not None:
            found[key] = before
            return
        store.put_if_absent(Record(key=key, status=Status.IN_PROGRESS, expires_at=now + 60,
                                   started_at=now, ttl=60.0))  # fmt: skip
        found[key] = None

    threads = [threading.Thread(target=create, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    seen = found.pop("seen-00")
    assert seen is not None and seen.status == Status.COMPLETED and set(found.values()) == {None}
    methods = request_counter.by_method()
    assert methods.get("PUT") == 15  # the absent keys are created
    assert methods.get("GET", 0) <= 4  # 16 looks; one listing when they arrive together


def test_a_record_deleted_here_is_no_longer_answered_from_memory(storage_env: str) -> None:
    runs: list[int] = []

    @once("forget-{n}", scope="app")
    def work(n: int) -> int:
        runs.append(n)
        return n

    assert work(1) == 1 and work(1) == 1 and runs == [1]
    store = BlobRecordStore()
    record = store.get("forget-1")
    assert record is not None and record.etag is not None
    store.delete("forget-1", record.etag)  # what `ops reset` does
    assert work(1) == 1 and runs == [1, 1]


def _racing_store(run_s: float) -> tuple[BlobRecordStore, RequestCounter]:
    """A store whose process has seen its creates keep losing, its runs taking `run_s`, and
    the counter of its own client's requests (a lease another test left renewing in this
    process is not counted)."""
    counter = RequestCounter()
    container = ContainerClient.from_connection_string(
        os.environ["AzureWebJobsStorage"], os.environ["RUNONCE_CONTAINER"],
        raw_request_hook=counter,
    )  # fmt: skip
    store = BlobRecordStore(container, scope=f"racing-{uuid.uuid4().hex[:8]}")  # its own layer
    crashed_run(store, f"warm-{uuid.uuid4().hex}", 60.0)  # the container exists
    layer = _layer(store)
    layer.engaged, layer.lost, layer.run_s = True, 1.0, run_s
    return store, counter


def _layer(store: BlobRecordStore) -> SpeedLayer:
    layer = speed_for(store)
    assert layer is not None
    return layer


def test_where_creates_race_a_copy_ranked_later_sees_the_record_instead_of_racing(
    storage_env: str,
) -> None:
    store, counter = _racing_store(0.5)
    layer = _layer(store)
    key = next(k for k in (f"ranked-{i}" for i in range(200)) if layer.create_delay(k) > 1.0)
    assert layer.create_delay(key) == layer.create_delay(key) <= 4 * 0.5  # a fixed rank
    handler = OnceHandler(store, key, in_progress_timeout=60.0, speed=layer)
    outcome: list[Any] = []
    copy = threading.Thread(target=lambda: outcome.append(handler.begin()))
    counter.reset()
    copy.start()
    now = time.time()
    first = Record(key=key, status=Status.IN_PROGRESS, started_at=now, expires_at=now + 60,
                   owner="ranked-first", ttl=60.0)  # fmt: skip
    store.put_if_absent(first)  # the copy ranked first creates it (the plain store: 1 PUT)
    copy.join(10)
    assert outcome[0].decision == Decision.BUSY and outcome[0].record.owner == "ranked-first"
    assert counter.by_method().get("PUT") == 1  # only the first copy's create


def test_where_creates_race_a_copy_looks_once_at_its_rank_not_also_before(
    storage_env: str,
) -> None:
    store, counter = _racing_store(0.05)
    layer = _layer(store)
    layer.completed = 1.0  # first looks found keys done (so no create-first)
    key = min((f"first-{i}" for i in range(200)), key=layer.create_delay)  # first
    forget_known()
    counter.reset()
    outcome = OnceHandler(store, key, in_progress_timeout=60.0, speed=layer).begin()
    assert outcome.decision == Decision.EXECUTE
    # one look when its rank comes (the key still absent), then the create: no read before
    assert counter.by_method() == {"GET": 1, "PUT": 1}


def test_a_process_waiting_for_one_key_at_a_time_never_runs_out_of_ticks() -> None:
    """A wait alone in its process pays its own tick whole: nobody shares it. Paid in part,
    as waits sharing ticks pay, a process taking keys one at a time behind a rival ran out of
    ticks after eight keys and then waited MAX_TICK for every key (two racers on 200 keys: 28
    to 71 s where one alone took 2.4 s)."""
    from blobsingleton._record_watch import RecordWatch, State

    ticks: list[list[str]] = []

    def ask(names: list[str], seen: dict[str, str | None]) -> dict[str, State]:
        ticks.append(names)
        return {name: State(True, f'"{len(ticks)}"') for name in names}  # each one changed

    class Unread:
        def read(self, key: str) -> None:
            return None

    watch = RecordWatch(None, "p", Unread())  # type: ignore[arg-type]
    watch._ask = ask  # type: ignore[method-assign]  # storage answering "changed" at once
    for i in range(20):
        changed, _ = watch.watch(f"p/k{i}", f"k{i}", '"old"', time.monotonic() + 30)
        assert changed
        assert watch._tokens >= 1.0, f"out of ticks after {i + 1} keys waited for one by one"
    assert len(ticks) == 20  # one tick (one request) per wait, never more
