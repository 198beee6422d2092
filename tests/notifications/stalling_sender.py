"""Child process: claims an event's run-once key, says so, then hangs before sending.

The parent SIGKILLs it there: the crash between "in-progress record written" and "email
sent" that the heartbeat must recover from within one `in_progress_timeout`.

usage: stalling_sender.py EVENT_ID
"""

from __future__ import annotations

import json
import sys
import threading

from azure.functions.queue import QueueMessage

from functions import notifications


class StallingSender:
    def send(self, notification: object) -> object:
        print("claimed", flush=True)  # the record exists: the parent may kill us now
        threading.Event().wait()
        raise AssertionError("unreachable")


def main() -> None:
    event_id = sys.argv[1]
    notifications.sender_from_settings = lambda: StallingSender()  # type: ignore[assignment]
    body = {"event_id": event_id, "type": "order.shipped", "to": "user@example.com",
            "subject": "Shipped", "text": "It is on its way."}  # fmt: skip
    msg = QueueMessage(id="original", body=json.dumps(body).encode(), dequeue_count=1)
    notifications.send_notification(msg)


if __name__ == "__main__":
    main()
