"""Upgrading from 0.2 (names without a namespace) keeps last week's promises.

0.2 kept a run-once record at `{encoded key}` and a lock at `{encoded key}`, at the root of
their containers. After the upgrade a record of that kind is still honoured for a window
after the namespace began (a deploy must not re-send last week's emails), and a new lock blob
continues the old blob's fencing token (so a store fenced by the old tokens keeps accepting).
The blobs are written here byte for byte as 0.2 wrote them.
"""

from __future__ import annotations

import json
import os
import time
import uuid

import azure.functions as func
import pytest
from blobsingleton import BlobLease, Mode, once
from blobsingleton._blob_records import _since
from blobsingleton._keys import encode_key
from libsupport import blob_service, request_counter


def container(setting: str) -> object:
    client = blob_service().get_container_client(os.environ[setting])
    if not client.exists():
        client.create_container()
    return client


def write_02_record(key: str, status: str, expires_in: float) -> None:
    """A run-once record exactly as 0.2's `Record.to_json` wrote it, at the container's root."""
    now = time.time()
    body = {"key": key, "status": status, "expires_at": now + expires_in, "started_at": now,
            "payload_hash": None, "result": {"sent": "last week"}, "owner": "old-instance-1",
            "attempt": 1}  # fmt: skip
    blob = container("RUNONCE_CONTAINER").get_blob_client(encode_key(key))  # type: ignore[attr-defined]
    blob.upload_blob(json.dumps(body, separators=(",", ":")).encode())


@pytest.fixture(autouse=True)
def fresh_window() -> None:
    _since.clear()  # each test's containers begin their namespace anew


def message(event_id: str) -> func.QueueMessage:
    return func.QueueMessage(id="m", body=json.dumps({"event_id": event_id}).encode())


def test_a_record_written_by_02_is_honoured_after_the_upgrade(storage_env: str) -> None:
    write_02_record("email-e1", "completed", expires_in=6 * 24 * 3600)
    runs: list[str] = []

    @once("email-{event_id}")
    def send(msg: func.QueueMessage) -> dict[str, str]:
        runs.append("sent")
        return {"sent": "now"}

    assert send(message("e1")) == {"sent": "last week"}
    assert send(message("e1")) == {"sent": "last week"}  # now from the namespace's copy
    assert runs == []
    assert send(message("e2")) == {"sent": "now"}  # a new key runs as ever


def test_an_02_run_still_in_progress_is_busy_not_run_again(storage_env: str) -> None:
    write_02_record("email-e3", "in_progress", expires_in=600)

    @once("email-{event_id}", mode=Mode.AT_MOST_ONCE, on_in_progress=lambda *a: "busy")
    def send(msg: func.QueueMessage) -> str:
        return "sent"

    assert send(message("e3")) == "busy"


def test_the_window_closes_after_the_setting_and_is_off_at_zero(
    storage_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_02_record("email-e4", "completed", expires_in=6 * 24 * 3600)
    monkeypatch.setenv("BLOBSINGLETON_LEGACY_DAYS", "0")

    @once("email-{event_id}")
    def send(msg: func.QueueMessage) -> str:
        return "sent again"

    assert send(message("e4")) == "sent again"


def test_without_02_records_the_upgrade_costs_no_request_per_key(storage_env: str) -> None:
    @once("cost-{event_id}")
    def work(msg: func.QueueMessage) -> None:
        return None

    work(message("warm"))  # first use: container, namespace marker (no 0.2 records found)
    request_counter.reset()
    work(message(uuid.uuid4().hex))
    # Create (keys here are new: no read first) and complete: no read of a 0.2 name either.
    assert request_counter.total() == 2


def test_a_new_lock_blob_continues_the_02_token(storage_env: str) -> None:
    locks = container("LEASE_CONTAINER")
    old = locks.get_blob_client(encode_key("import-acme"))  # type: ignore[attr-defined]
    old.create_page_blob(0, sequence_number=41)
    with BlobLease("import-acme") as lease:
        assert lease.token == 42
        assert lease.name.endswith("/import-acme") and lease.name != "import-acme"
