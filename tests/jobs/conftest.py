"""Fixtures for the batch-job tests: per-test container and queues, a callback receiver,
and helpers that submit a job and run its units through the real function code."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.functions.queue import QueueMessage

from harness.callbacks import RECEIVER_SETTINGS
from shared import storage
from shared.jobs import JobRequest, JobSettings, JobStore, Submitted, submit_job
from tests.support import AppSettings, child_env


@pytest.fixture
def jobs_env(storage_env: str, app_settings: AppSettings) -> JobSettings:
    """Settings of a job app of its own: container, queues, short stall and callback budget,
    and the local receiver allowed (loopback, plain http)."""
    suffix = uuid.uuid4().hex[:10]
    app_settings.set(
        {
            "JOBS_CONTAINER": f"jobs-{suffix}",
            "JOB_UNITS_QUEUE": f"units-{suffix}",
            "JOB_STALL_SECONDS": "1",
            "JOB_CALLBACK_TIMEOUT": "1",
            "JOB_CALLBACK_ATTEMPTS": "2",
            "JOB_CALLBACK_DEADLINE": None,
            "JOB_WATCH_SCHEDULE": "*/30 * * * * *",
            **RECEIVER_SETTINGS,  # the tests' receivers: loopback, plain http
            "JOB_UNIT_HANDLER": None,
            "JOB_MAX_UNITS": None,
        }
    )
    return JobSettings.from_env()


@pytest.fixture
def jobs_process_env(jobs_env: JobSettings, subprocess_env: dict[str, str]) -> dict[str, str]:
    """Environment for child processes working on the same job app (its settings included)."""
    return child_env()


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


def run_announcements(settings: JobSettings) -> int:
    """Run every queued announcement through the real queue function."""
    from functions.jobs import announce_job

    messages = receive_all(settings, settings.announce_queue)
    for message in messages:
        announce_job(message)
    return len(messages)


def run_units(settings: JobSettings) -> int:
    """Run every queued unit through the real queue function, like one instance would."""
    from functions.jobs import run_job_unit

    messages = receive_all(settings)
    for message in messages:
        run_job_unit(message)
    return len(messages)
