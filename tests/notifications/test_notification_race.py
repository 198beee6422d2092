"""8 real processes see the same 200 events: exactly 200 emails go out."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from azure.functions.queue import QueueMessage

from shared.notifications import read_outbox
from shared.storage import queue_client

NOTIFIER = str(Path(__file__).with_name("notifier.py"))


def test_eight_processes_same_200_events_exactly_200_emails(
    subprocess_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, app_functions: dict[str, Any]
) -> None:
    queue = f"race-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("NOTIFICATIONS_QUEUE", queue)
    monkeypatch.delenv("SENDGRID_API_KEY", raising=False)
    env = dict(subprocess_env, NOTIFICATIONS_QUEUE=queue)
    env.pop("SENDGRID_API_KEY", None)
    deferred = queue_client(queue)
    deferred.create_queue()

    procs = [subprocess.Popen([sys.executable, NOTIFIER, "0", "200"], env=env) for _ in range(8)]
    assert all(p.wait(300) == 0 for p in procs)

    # Copies deferred while another instance was sending come back later: deliver them too.
    send = app_functions["send_notification"].get_user_function()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        props = deferred.get_queue_properties()
        if props.approximate_message_count == 0:
            break
        for m in deferred.receive_messages(messages_per_page=32, visibility_timeout=60):
            msg = QueueMessage(id=m.id, body=m.content, dequeue_count=m.dequeue_count)
            send(msg)
            deferred.delete_message(m)
        time.sleep(0.5)

    emails = Counter(email.event_id for email in read_outbox())
    assert len(emails) == 200, "some events were never emailed"
    assert sum(emails.values()) == 200, f"duplicates: {sum(emails.values()) - 200}"
