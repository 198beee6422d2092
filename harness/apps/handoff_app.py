"""One queue function that holds a @singleton lease for HOLD_SECONDS, recording when.

Settings: HANDOFF_QUEUE (one per instance in the test), HOLD_SECONDS, HANDOFF_RECORD_FILE.
"""

from __future__ import annotations

import json
import os
import time

import azure.functions as func
from blobsingleton import Busy, current_lease, singleton

app = func.FunctionApp()


def record(event: str) -> None:
    line = json.dumps(
        {"event": event, "instance": os.environ.get("WEBSITE_INSTANCE_ID"), "at": time.time()}
    )
    with open(os.environ["HANDOFF_RECORD_FILE"], "a", encoding="utf-8") as out:
        out.write(line + "\n")


@app.queue_trigger(arg_name="msg", queue_name="%HANDOFF_QUEUE%", connection="AzureWebJobsStorage")
@singleton("handoff", busy=Busy.wait(timeout=120))
def hold(msg: func.QueueMessage) -> None:
    current_lease().ensure_held()
    record("acquired")
    time.sleep(float(os.environ["HOLD_SECONDS"]))
    record("returning")
