"""The notification function with no guard: what an app without `@once` does.

For the demo only (`python -m harness demo`, `--app harness.apps.unguarded_app`): the
same parsing, poisoning and sending as `functions/notifications.py`, minus the run-once record,
so every instance that sees an event sends its email.
"""

from __future__ import annotations

import azure.functions as func

from shared import poison
from shared.notifications import InvalidNotification, Notification, sender_from_settings

QUEUE = "%NOTIFICATIONS_QUEUE%"

app = func.FunctionApp()


@app.queue_trigger(arg_name="msg", queue_name=QUEUE, connection="AzureWebJobsStorage")
def send_notification(msg: func.QueueMessage) -> None:
    try:
        notification = Notification.parse(msg.get_body())
    except InvalidNotification as exc:
        poison.reject(msg, QUEUE, str(exc))
        return
    sender_from_settings().send(notification)
