"""A tiny function app for the devhost tests; every invocation appends a JSON line to a file.

Settings: SAMPLE_QUEUE, SAMPLE_SCHEDULE, SAMPLE_RECORD_FILE (set by the tests).
"""

from __future__ import annotations

import json
import os
import time

import azure.functions as func
from blobsingleton import once

app = func.FunctionApp()


def record(function: str, **fields: object) -> None:
    line = json.dumps(
        {"function": function, "instance": os.environ.get("WEBSITE_INSTANCE_ID"), **fields}
    )
    with open(os.environ["SAMPLE_RECORD_FILE"], "a", encoding="utf-8") as out:
        out.write(line + "\n")


@app.queue_trigger(arg_name="msg", queue_name="%SAMPLE_QUEUE%", connection="AzureWebJobsStorage")
def sample_queue(msg: func.QueueMessage) -> None:
    """Bodies starting with "fail" always fail; "slow" ones take 2 s, "sleep:N" ones N s."""
    body = msg.get_body().decode()
    record("sample_queue", event="start", id=msg.id, body=body, dequeue_count=msg.dequeue_count)
    if body.startswith("slow"):
        time.sleep(2.0)
    if body.startswith("sleep:"):
        time.sleep(float(body.partition(":")[2]))
    if body.startswith("fail"):
        raise RuntimeError("this message always fails")
    record("sample_queue", event="done", id=msg.id, body=body)


@app.timer_trigger(schedule="%SAMPLE_SCHEDULE%", arg_name="timer", use_monitor=True)
def sample_timer(timer: func.TimerRequest) -> None:
    record("sample_timer", past_due=timer.past_due, status=timer.schedule_status)


@app.route(route="items/{item_id:int}", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
def sample_item(req: func.HttpRequest) -> func.HttpResponse:
    payload = {"item_id": req.route_params.get("item_id"), "q": req.params.get("q")}
    return func.HttpResponse(json.dumps(payload), mimetype="application/json")


@app.route(route="hello/{name?}", auth_level=func.AuthLevel.ANONYMOUS)
async def sample_hello(req: func.HttpRequest) -> func.HttpResponse:
    name = req.route_params.get("name") or "world"
    if name == "boom":
        raise ValueError("boom")
    return func.HttpResponse(f"hello {name}", status_code=200)


@app.route(route="orders/{order_id}", methods=["POST"], auth_level=func.AuthLevel.ANONYMOUS)
@once("order-{order_id}")
def sample_order(req: func.HttpRequest) -> func.HttpResponse:
    """Takes an order once: a retried request gets the first call's response."""
    order_id = req.route_params["order_id"]
    record("sample_order", order_id=order_id)
    body = json.dumps({"order": order_id, "accepted_at": time.time()})
    response = func.HttpResponse(body, status_code=201, mimetype="application/json")
    response.headers["Location"] = f"/api/orders/{order_id}"
    return response
