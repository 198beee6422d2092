"""Child process: one "instance" delivering its own copy of each event through the real function.

usage: notifier.py FIRST_ID COUNT
"""

from __future__ import annotations

import json
import sys

from azure.functions.queue import QueueMessage

from function_app import app


def main() -> None:
    first, count = int(sys.argv[1]), int(sys.argv[2])
    function = next(f for f in app.get_functions() if f.get_function_name() == "send_notification")
    send = function.get_user_function()
    for i in range(first, first + count):
        body = {
            "event_id": f"evt-{i:05d}",
            "type": "order.shipped",
            "to": f"user{i}@example.com",
            "subject": "Your order has shipped",
            "text": "It is on its way.",
        }
        msg = QueueMessage(id=f"copy-{i}", body=json.dumps(body).encode(), dequeue_count=1)
        send(msg)


if __name__ == "__main__":
    main()
