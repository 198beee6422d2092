"""Hostile HTTP bodies and route parameters: a 4xx with a JSON reason, never an exception.

An exception in an HTTP function is a 500 and a traceback in the logs; what the client sent
wrong must come back to the client as a 400 that says what, and nothing must be stored.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import azure.functions as func
import pytest

import function_app
from tests.hostile.corpus import GENERIC_BODIES, HOSTILE_VALUES
from tests.support import fresh_functions

HOSTILE_ROUTE_VALUES = [
    "\ud800",
    "..",
    "../../x",
    "a/b",
    "a\\b",
    "%2e%2e",
    "a\x00",
    " ",
    "x" * 2000,
    "\u202e",
]


def http_function(name: str) -> Callable[[func.HttpRequest], Any]:
    return fresh_functions(function_app.app)[name].get_user_function()


def request(method: str, url: str, body: bytes = b"", **route: str) -> func.HttpRequest:
    return func.HttpRequest(method=method, url=url, body=body, route_params=route)


def reason_of(response: func.HttpResponse) -> dict[str, Any]:
    body = json.loads(response.get_body())
    assert isinstance(body, dict) and body.get("error"), body
    return body


@pytest.mark.parametrize(
    "body",
    [pytest.param(v, id=k) for k, v in GENERIC_BODIES.items()]
    + [
        pytest.param(
            json.dumps({"units": value, "callback_url": "https://x.example/cb"}).encode(),
            id=f"units = {name}",
        )
        for name, value in HOSTILE_VALUES.items()
    ]
    + [
        pytest.param(json.dumps({"job_id": value, "units": []}).encode(), id=f"job_id = {name}")
        for name, value in HOSTILE_VALUES.items()
    ],
)
def test_start_job_answers_400_to_a_hostile_body(app_env: dict[str, str], body: bytes) -> None:
    response = http_function("start_job")(request("POST", "/api/jobs", body))
    assert response.status_code == 400
    assert reason_of(response)["error"] == "invalid_job"


@pytest.mark.parametrize("value", HOSTILE_ROUTE_VALUES)
def test_get_job_answers_400_or_404_to_a_hostile_id(app_env: dict[str, str], value: str) -> None:
    response = http_function("get_job")(request("GET", "/api/jobs/x", job_id=value))
    assert response.status_code in (400, 404)
    reason_of(response)


@pytest.mark.parametrize("value", HOSTILE_ROUTE_VALUES)
def test_run_import_now_answers_400_to_a_hostile_account(
    app_env: dict[str, str],
    value: str,
) -> None:
    response = http_function("run_import_now")(request("POST", "/api/x", account=value))
    assert response.status_code == 400
    assert reason_of(response)["error"] == "invalid_account"
