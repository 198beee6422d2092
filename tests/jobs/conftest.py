"""Fixtures for the batch-job tests: per-test container and queues, a callback receiver,
and helpers that submit a job and run its units through the real function code."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.functions.queue import QueueMessage

from shared import storage
from shared.jobs import JobRequest, JobSettings, JobStore, Submitted, submit_job

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def jobs_env(storage_env: str, monkeypatch: pytest.MonkeyPatch) -> JobSettings:
    """Settings of a job app of its own: container, queues, short stall and callback budget."""
    suffix = uuid.uuid4().hex[:10]
    monkeypatch.setenv("JOBS_CONTAINER", f"jobs-{suffix}")
    monkeypatch.setenv("JOB_UNITS_QUEUE", f"units-{suffix}")
    monkeypatch.setenv("JOB_STALL_SECONDS", "1")
    monkeypatch.setenv("JOB_CALLBACK_TIMEOUT", "1")
    monkeypatch.setenv("JOB_CALLBACK_ATTEMPTS", "2")
    monkeypatch.setenv("JOB_WATCH_SCHEDULE", "*/30 * * * * *")
    monkeypatch.delenv("JOB_UNIT_HANDLER", raising=False)
    monkeypatch.delenv("JOB_MAX_UNITS", raising=False)
    return JobSettings.from_env()


@pytest.fixture
def jobs_process_env(jobs_env: JobSettings) -> dict[str, str]:
    """Environment for child processes working on the same job app."""
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}


def units(count: int, prefix: str = "u") -> list[dict[str, Any]]:
    return [{"id": f"{prefix}{i:05d}", "payload": {"n": i}} for i in range(count)]


def submit(
    settings: JobSettings, callback_url: str, unit_list: list[dict[str, Any]], job_id: str
) -> Submitted:
    body = {"job_id": job_id, "units": unit_list, "callback_url": callback_url}
    request = JobRequest.parse(json.dumps(body), max_units=settings.max_units)
    return submit_job(request, JobStore(settings))


def receive_all(settings: JobSettings, queue: str | None = None) -> list[QueueMessage]:
    """Every visible message of the queue, deleted from it, as the trigger would bind them."""
    client = storage.queue_client(queue or settings.queue)
    found: list[QueueMessage] = []
    while True:
        try:
            batch = list(client.receive_messages(messages_per_page=32, max_messages=32))
        except ResourceNotFoundError:
            return found
        if not batch:
            return found
        for message in batch:
            found.append(
                QueueMessage(  # the worker's subclass, with the dequeue count
                    id=message.id, body=message.content, dequeue_count=message.dequeue_count
                )
            )
            client.delete_message(message)


def run_units(settings: JobSettings) -> int:
    """Run every queued unit through the real queue function, like one instance would."""
    from functions.jobs import run_job_unit

    messages = receive_all(settings)
    for message in messages:
        run_job_unit(message)
    return len(messages)
