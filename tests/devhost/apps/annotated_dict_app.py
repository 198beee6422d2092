"""An HTTP function annotated `-> dict`: the worker refuses to load it."""

from __future__ import annotations

from typing import Any

import azure.functions as func

app = func.FunctionApp()


@app.route(route="annotated", auth_level=func.AuthLevel.ANONYMOUS)
def annotated_dict(req: func.HttpRequest) -> dict:  # type: ignore[type-arg]
    return {}


def unused(value: Any) -> Any:
    return value
