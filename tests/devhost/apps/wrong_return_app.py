"""Functions that break the Python worker's return rules; each fails there and in devhost."""

from __future__ import annotations

import azure.functions as func

app = func.FunctionApp()


@app.queue_trigger(arg_name="msg", queue_name="wrong-returns", connection="AzureWebJobsStorage")
def queue_returns_value(msg: func.QueueMessage) -> None:
    """A queue function has no $return binding: any non-None return fails the invocation."""
    return {"handled": msg.get_body().decode()}  # type: ignore[return-value]


@app.timer_trigger(schedule="0 0 0 1 1 *", arg_name="timer", use_monitor=False)
def timer_returns_value(timer: func.TimerRequest) -> None:
    return "done"  # type: ignore[return-value]


@app.route(route="dict", auth_level=func.AuthLevel.ANONYMOUS)
def http_returns_dict(req: func.HttpRequest):  # type: ignore[no-untyped-def]
    """An HTTP $return takes HttpResponse or str: a dict cannot be encoded."""
    return {"status": "ok"}


@app.route(route="nothing", auth_level=func.AuthLevel.ANONYMOUS)
def http_returns_none(req: func.HttpRequest):  # type: ignore[no-untyped-def]
    return None


@app.route(route="text", auth_level=func.AuthLevel.ANONYMOUS)
def http_returns_str(req: func.HttpRequest) -> str:
    return "plain text"
