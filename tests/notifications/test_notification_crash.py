"""A sender killed after claiming its event, before sending: recovered within one timeout.

The killed process leaves an in-progress record that nobody renews. Each copy of the event that
arrives meanwhile is held in its process for the busy policy's `hold` (3 s, shorter than the
tests' 5 s in-progress timeout), then deferred once, until that record's expiry; when it comes
back, the first copy takes the key over and sends, and the rest get the stored result. Issue
10's target: the email is out within 20 s of the kill, with at most one deferral per copy (the
old fixed 5-minute in-progress timeout held such an event for 5 minutes, re-deferring its copies
every 5 s). How soon is `bench failover`'s claim (`once_kill`, judged in one run); this test
holds the counts (one email, one deferral per copy) and a bound of 100 s, five times the target
and over ten times what it takes on an idle machine, which the old behaviour's five minutes
would still cross.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from azure.functions.queue import QueueMessage

from functions.notifications import send_notification
from shared.notifications import read_outbox
from shared.storage import queue_client

STALLING_SENDER = str(Path(__file__).with_name("stalling_sender.py"))
COPIES = 4


def invoked(msg: QueueMessage) -> None:
    """The function as the worker runs it."""
    send_notification(msg)


@pytest.mark.slow
def test_a_sender_killed_before_sending_is_recovered_within_20_s_one_deferral_per_copy(
    subprocess_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = f"crash-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("NOTIFICATIONS_QUEUE", queue)
    monkeypatch.delenv("SENDGRID_API_KEY", raising=False)
    env = dict(subprocess_env, NOTIFICATIONS_QUEUE=queue)
    env.pop("SENDGRID_API_KEY", None)
    event_id = f"evt-crash-{uuid.uuid4().hex[:8]}"
    copies = queue_client(queue)
    copies.create_queue()

    child = subprocess.Popen(
        [sys.executable, STALLING_SENDER, event_id], env=env, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "claimed"
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)
    killed_at = time.monotonic()

    body = {"event_id": event_id, "type": "order.shipped", "to": "user@example.com",
            "subject": "Shipped", "text": "It is on its way."}  # fmt: skip
    with ThreadPoolExecutor(COPIES) as pool:  # every other instance's copy, right after the crash
        copy = json.dumps(body).encode()
        list(pool.map(lambda i: invoked(QueueMessage(id=f"copy-{i}", body=copy)), range(COPIES)))
    assert read_outbox(event_id=event_id) == []
    assert copies.get_queue_properties().approximate_message_count == COPIES  # deferred once

    deliveries = 0
    sent_at = None
    deadline = time.monotonic() + 150
    while deliveries < COPIES and time.monotonic() < deadline:
        for m in copies.receive_messages(messages_per_page=32, visibility_timeout=60):
            invoked(QueueMessage(id=m.id, body=m.content, dequeue_count=2))
            copies.delete_message(m)
            deliveries += 1
            if sent_at is None and read_outbox(event_id=event_id):
                sent_at = time.monotonic()
        time.sleep(0.2)  # the deferred copies become visible on the queue's own clock

    assert len(read_outbox(event_id=event_id)) == 1
    assert sent_at is not None and sent_at - killed_at <= 100.0, sent_at and sent_at - killed_at
    assert deliveries == COPIES
    assert copies.get_queue_properties().approximate_message_count == 0  # none deferred twice
