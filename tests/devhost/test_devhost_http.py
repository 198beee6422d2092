"""HTTP triggers: routes with parameters, function keys, async functions, errors."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from devhost_testkit import FUNCTION_KEY

from devhost.http_server import compile_route
from harness.services import free_port


def _call(
    url: str, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read(), _lower(response.headers.items())
    except urllib.error.HTTPError as error:
        return error.code, error.read(), _lower(error.headers.items())


def _lower(headers: Any) -> dict[str, str]:
    return {str(name).lower(): str(value) for name, value in headers}


def _get(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    status, body, _ = _call(url, method, headers)
    return status, body


def test_route_templates() -> None:
    pattern = compile_route("items/{item_id:int}")
    assert pattern.match("items/42").groupdict() == {"item_id": "42"}
    assert pattern.match("items/abc") is None
    optional = compile_route("hello/{name?}")
    assert optional.match("hello").groupdict() == {"name": None}
    assert optional.match("Hello/ada").groupdict() == {"name": "ada"}
    assert compile_route("files/{*path}").match("files/a/b.txt").groupdict() == {"path": "a/b.txt"}


def test_http_routes_keys_and_errors(start_host: Any, base_settings: dict[str, Any]) -> None:
    port = free_port()
    start_host(base_settings, instances=1, http_port=port)
    base = f"http://127.0.0.1:{port}/api"

    assert _get(f"{base}/items/42")[0] == 401
    assert _get(f"{base}/items/42?code=wrong")[0] == 401

    status, body = _get(f"{base}/items/42?code={FUNCTION_KEY}&q=x")
    assert status == 200
    assert json.loads(body) == {"item_id": "42", "q": "x"}
    status, body = _get(f"{base}/items/7", headers={"x-functions-key": FUNCTION_KEY})
    assert (status, json.loads(body)["item_id"]) == (200, "7")

    assert _get(f"{base}/hello/ada") == (200, b"hello ada")  # anonymous, async def
    assert _get(f"{base}/hello") == (200, b"hello world")
    status, body = _get(f"{base}/hello/boom")
    assert status == 500 and json.loads(body) == {"error": "ValueError"}
    assert _get(f"{base}/items/42?code={FUNCTION_KEY}", method="POST")[0] == 405
    assert _get(f"{base}/items/not-a-number?code={FUNCTION_KEY}")[0] == 404
    assert _get(f"{base}/nothing-here")[0] == 404


def test_a_retried_request_gets_the_first_response_through_the_host(
    start_host: Any, base_settings: dict[str, Any], records: Any
) -> None:
    """An HTTP function under `@once`: the client retries (its answer was lost), and the
    duplicate gets what the first call returned, status, headers and body, not a 500."""
    port = free_port()
    start_host(base_settings, instances=1, http_port=port)
    url = f"http://127.0.0.1:{port}/api/orders/o-17"
    first = _call(url, method="POST")
    again = _call(url, method="POST")
    assert first[0] == again[0] == 201
    assert first[1] == again[1] and json.loads(first[1])["order"] == "o-17"
    assert again[2]["location"] == "/api/orders/o-17"
    assert again[2]["content-type"].startswith("application/json")
    assert [r["order_id"] for r in records.where(function="sample_order")] == ["o-17"]
