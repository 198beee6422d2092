"""A function app whose queue function DEFERs through a guarded helper.

Settings: DEFER_QUEUE, SAMPLE_RECORD_FILE, LEASE_CONTAINER (set by the test). With
DEFER_TAKES_MESSAGE set the helper takes the message it would re-enqueue; without it the helper
does not, and the app must fail to index.
"""

from __future__ import annotations

import json
import os

import azure.functions as func
from blobsingleton import Busy, singleton

app = func.FunctionApp()


def record(function: str, **fields: object) -> None:
    with open(os.environ["SAMPLE_RECORD_FILE"], "a", encoding="utf-8") as out:
        out.write(json.dumps({"function": function, **fields}) + "\n")


TAKES_MESSAGE = bool(os.environ.get("DEFER_TAKES_MESSAGE"))


@app.queue_trigger(arg_name="msg", queue_name="%DEFER_QUEUE%", connection="AzureWebJobsStorage")
def take(msg: func.QueueMessage) -> None:
    key = msg.get_body().decode()
    record("take", id=msg.id, key=key, dequeue_count=msg.dequeue_count)
    if TAKES_MESSAGE:
        work_with(key, msg)
    else:
        work(key)  # no message to re-enqueue: refused when the app is indexed


if TAKES_MESSAGE:

    @singleton("defer-{key}", busy=Busy.defer(queue="%DEFER_QUEUE%", after=1), scope="app")
    def work_with(key: str, msg: func.QueueMessage) -> None:
        record("work", key=key)

else:

    @singleton("defer-{key}", busy=Busy.defer(queue="%DEFER_QUEUE%", after=1), scope="app")
    def work(key: str) -> None:
        record("work", key=key)
