"""A naive notifications app for the scenario tests: emails on every delivery (no run-once)."""

from __future__ import annotations

import json

import azure.functions as func

from shared.notifications.outbox import write_outbox

app = func.FunctionApp()


@app.queue_trigger(
    arg_name="msg", queue_name="%NOTIFICATIONS_QUEUE%", connection="AzureWebJobsStorage"
)
def naive_send(msg: func.QueueMessage) -> None:
    event = json.loads(msg.get_body())
    write_outbox(event["event_id"], {"subject": event["subject"]})


@app.queue_trigger(arg_name="msg", queue_name="%UNRELATED_QUEUE%", connection="AzureWebJobsStorage")
def unrelated(msg: func.QueueMessage) -> None:
    """Not bound to %NOTIFICATIONS_QUEUE%: the scenario must not run it (its setting is unset)."""
