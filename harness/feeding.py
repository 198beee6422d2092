"""Submit jobs without letting the units queue grow long, because of an Azurite limit.

Azurite scans the whole queue on every receive and delete (measured here: a delete takes
~80 ms and a receive ~140 ms with 10,000 messages queued, ~10-25 ms with 500), so a
10,000-message backlog makes the emulator, not the app, the bottleneck. Azure Storage
queues have no such cost. The jobs are unchanged (same records, counters and messages,
written by `shared.jobs.submit_job`); only their messages are enqueued in chunks, each
once the queue has room for it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from harness import kit
from shared.jobs import JobRequest, JobStore, submit_job
from shared.jobs.submit import Enqueuer, enqueue_units

DEFAULT_BACKLOG = 1000
CHUNK = 250


def queue_depth(name: str) -> int:
    return kit.queue_depths([name])[name]


def paced(max_backlog: int, stop: threading.Event | None = None) -> Enqueuer:
    """An enqueuer sending CHUNK messages at a time, once fewer than `max_backlog` - CHUNK
    messages are queued (0: everything at once)."""
    if max_backlog <= 0:
        return enqueue_units

    def enqueue(request: JobRequest, store: JobStore) -> None:
        units = list(request.units)  # the harness submits its units inline
        for start in range(0, len(units), CHUNK):
            while queue_depth(store.settings.queue) > max(0, max_backlog - CHUNK):
                if stop is not None and stop.is_set():
                    return
                time.sleep(0.2)
            enqueue_units(request, store, units[start : start + CHUNK])

    return enqueue


def job_request(job_id: str, units: int, callback_url: str) -> JobRequest:
    body = {
        "job_id": job_id,
        "units": [{"id": f"u{k:05d}", "payload": {"unit": k}} for k in range(units)],
        "callback_url": callback_url,
    }
    return JobRequest.parse(json.dumps(body), max_units=units)


def submit_jobs(
    job_ids: list[str],
    units: int,
    callback_url: str,
    *,
    max_backlog: int = DEFAULT_BACKLOG,
    threads: int = 4,
    stop: threading.Event | None = None,
    on_error: Callable[[BaseException], None] | None = None,
) -> threading.Thread:
    """Submit the jobs in a background thread (paced); returns the started thread."""

    def submit(job_id: str) -> None:
        submit_job(
            job_request(job_id, units, callback_url), JobStore(), enqueue=paced(max_backlog, stop)
        )

    def run() -> None:
        try:
            with ThreadPoolExecutor(threads, thread_name_prefix="submit") as pool:
                for _ in pool.map(submit, job_ids):
                    pass
        except BaseException as error:
            if on_error is None:
                raise
            on_error(error)

    thread = threading.Thread(target=run, name="submit-jobs", daemon=True)
    thread.start()
    return thread
