"""Storage requests per invocation, counted by the clients' request hook (not by reasoning).

Measures, steady state with no contention (containers and lock blobs exist):
- a `@singleton` invocation (acquire with fencing token, release);
- a first `@once` run, and a duplicate of a completed key: in the process that completed it
  (answered from memory), in another process that sees mostly duplicates (it reads first),
  and in one that was running new keys (it creates first, then learns the key is done);
- the request sequence of WebJobs' Function-mode `[Singleton]` (HEAD, Acquire, HEAD, Set
  Metadata, Release), replayed with the same SDK for comparison;
- what holding a lease costs per minute (renewals every period/3, plus the owner record).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
import uuid
from typing import Any

import azure.functions as func
from azure.core.exceptions import ResourceExistsError
from blobsingleton import BlobLease, once, singleton
from blobsingleton.testing import forget_remembered_records

from bench import alternatives
from bench._storage import azurite_storage
from devhost.request_counting import request_counter
from shared import storage

#: Requests per operation, at most. `@singleton` polling (`fair=False`): acquire, fencing
#: token, release. Waiting in line (the default): one more, the releaser's look at the line,
#: which is the floor for a fair release: waiters cannot write the leased lock blob and no
#: lease operation reports them (docs/performance.md, "The physical floor").
TARGETS = {
    "singleton_invocation_polling": 3,
    "singleton_invocation": 4,
    "once_first_run": 3,
    "once_duplicate": 1,
}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument(
        "--hold-seconds",
        type=float,
        default=11.0,
        help="how long to hold a lease when measuring renewal cost",
    )


def _per_call(fn: Any, iterations: int) -> float:
    request_counter.reset()
    for i in range(iterations):
        fn(i)
    return request_counter.total() / iterations


def _message(field: str, value: str) -> func.QueueMessage:
    return func.QueueMessage(id=value, body=json.dumps({field: value}).encode())


def _elsewhere(deliver: Any, event_id: str) -> float:
    """Requests of one duplicate in a process that never saw the key done (its memory of
    completed records cleared), right after that process ran new keys (so it creates first):
    a few new keys run first, not counted, whatever the process did before."""
    for i in range(10):
        deliver(_message("event_id", f"{event_id}-new-{uuid.uuid4().hex[:8]}-{i}"))
    forget_remembered_records()
    return _per_call(lambda i: deliver(_message("event_id", event_id)), 1)


def _duplicates_elsewhere(deliver: Any, iterations: int) -> float:
    """Requests per duplicate in a process that sees mostly duplicates (it reads first), the
    record never seen there before: after a few duplicates (not counted) to get there."""
    for i in range(10):
        forget_remembered_records()
        deliver(_message("event_id", f"e{i % iterations}"))

    def one(i: int) -> None:
        forget_remembered_records()
        deliver(_message("event_id", f"e{i}"))

    return _per_call(one, iterations)


def _webjobs_singleton_sequence(key: str) -> None:
    """The requests WebJobs makes per Function-mode [Singleton] invocation (platform facts)."""
    container = storage.blob_service().get_container_client(os.environ["LEASE_CONTAINER"])
    blob = container.get_blob_client(f"webjobs/{key}")
    blob.get_blob_properties()
    lease = blob.acquire_lease(15)
    blob.get_blob_properties(lease=lease)
    blob.set_blob_metadata({"FunctionInstance": str(uuid.uuid4())}, lease=lease)
    lease.release()


def _alternatives(iterations: int) -> dict[str, dict[str, Any]]:
    """Requests per first run and per duplicate (the same key again, after it finished) of
    each alternative, and whether the duplicate ran the work again."""
    container = storage.blob_service().get_container_client("bench-alternatives")
    with contextlib.suppress(ResourceExistsError):
        container.create_container()
    return {name: _alternative_cost(alternatives.make(name, container), iterations)
            for name in alternatives.NAMES}  # fmt: skip


def _alternative_cost(guard: alternatives.Alternative, iterations: int) -> dict[str, Any]:
    runs = [0]

    def work() -> None:
        runs[0] += 1

    guard.handle("warm", work)  # the container and other keys exist: steady state
    first = _per_call(lambda i: guard.handle(f"{guard.name}-{i}", work), iterations)
    runs[0] = 0
    duplicate = _per_call(lambda i: guard.handle(f"{guard.name}-{i}", work), iterations)
    return {"first_run": first, "duplicate": duplicate, "duplicate_runs_work_again": runs[0] > 0}


def run(args: argparse.Namespace) -> dict[str, Any]:
    with azurite_storage():
        os.environ["LEASE_CONTAINER"] = "bench-locks"
        os.environ["RUNONCE_CONTAINER"] = "bench-runonce"

        @singleton("bench-{account}")
        def guarded(msg: func.QueueMessage) -> None:
            return None

        @singleton("bench-polling-{account}", fair=False)
        def guarded_polling(msg: func.QueueMessage) -> None:
            return None

        @once("bench-{event_id}")
        def deliver(msg: func.QueueMessage) -> None:
            return None

        n = args.iterations
        # Warm-up: create containers and lock blobs, so what follows is the steady state.
        guarded(_message("account", "A"))
        guarded_polling(_message("account", "A"))
        deliver(_message("event_id", "warm"))
        BlobLease("bench-hold").acquire().release()
        storage.blob_service().get_container_client("bench-locks").get_blob_client(
            "webjobs/k"
        ).upload_blob(b"", overwrite=True)
        result: dict[str, Any] = {
            "iterations": n,
            "singleton_invocation": _per_call(lambda i: guarded(_message("account", "A")), n),
            "singleton_invocation_polling": _per_call(
                lambda i: guarded_polling(_message("account", "A")), n
            ),
            "once_first_run": _per_call(lambda i: deliver(_message("event_id", f"e{i}")), n),
            "once_duplicate_same_process": _per_call(
                lambda i: deliver(_message("event_id", f"e{i}")), n
            ),
            "once_duplicate_after_new_keys": _elsewhere(deliver, "e0"),
            "once_duplicate": _duplicates_elsewhere(deliver, n),
            "webjobs_function_singleton": _per_call(lambda i: _webjobs_singleton_sequence("k"), n),
        }
        result["alternatives"] = _alternatives(n)
        request_counter.reset()
        with BlobLease("bench-hold"):
            time.sleep(args.hold_seconds)
        held = request_counter.total() - 3  # minus acquire, fence, release
        result["hold_requests_per_minute"] = round(held * 60 / args.hold_seconds, 1)
        result["lease_period_s"] = 15
    result["targets"] = TARGETS
    result["targets_met"] = all(result[k] <= v for k, v in TARGETS.items())
    return result
