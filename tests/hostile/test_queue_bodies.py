"""Hostile queue bodies: every queue function poisons what it cannot run, at once, and never raises.

The rule (issue 10, section 1): a body that can never succeed costs one attempt. The function
copies it to `{queue}-poison`, logs the message id and the reason, and returns normally, so the
host deletes it. Raising instead would cost 5 attempts with 5 tracebacks before the host poisons
it. Each function is called as the worker calls it, on real Azurite.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from azure.functions.queue import QueueMessage

import function_app
from shared import storage
from tests.hostile.corpus import GENERIC_BODIES, HOSTILE_VALUES, MAX_QUEUE_BODY
from tests.support import fresh_functions


def valid_bodies() -> dict[str, dict[str, Any]]:
    return {
        "send_notification": {
            "event_id": "evt-1",
            "type": "order.shipped",
            "to": ["someone@example.com"],
            "subject": "Shipped",
            "text": "Your order has shipped.",
        },
        "import_account": {
            "account": "acme",
            "run_date": "2026-11-22",
            "run_id": "2026-11-22",
            "trigger": "nightly",
        },
        "run_job_unit": {"job_id": "job-1", "unit_id": "u-1", "total": 1, "payload": {"n": 1}},
        "fail_job_unit": {"job_id": "job-1", "unit_id": "u-1", "total": 1, "payload": {"n": 1}},
        "announce_job": {"job_id": "job-1"},
    }


def hostile_cases() -> Iterator[tuple[str, str, bytes]]:
    for function, body in valid_bodies().items():
        for name, raw in GENERIC_BODIES.items():
            yield function, name, raw
        for field in body:
            for name, value in HOSTILE_VALUES.items():
                mutated = dict(body, **{field: value})
                yield function, f"{field} = {name}", json.dumps(mutated).encode()
        yield function, "extra unknown field", json.dumps(dict(body, zzz=1)).encode()


def test_every_hostile_body_fits_in_a_queue_message() -> None:
    """Bigger bodies cannot reach a queue function at all: the queue refuses them."""
    assert all(len(body) <= MAX_QUEUE_BODY for _, _, body in hostile_cases())


def queue_functions() -> dict[str, tuple[Callable[[QueueMessage], Any], str]]:
    """Each queue function of the app as the worker indexes it, with its queue name."""
    found = {}
    for function in fresh_functions(function_app.app).values():
        trigger = function.get_trigger().get_dict_repr()
        if trigger["type"] == "queueTrigger":
            found[function.get_function_name()] = (
                function.get_user_function(),
                trigger["queueName"],
            )
    return found


def test_every_queue_function_has_a_valid_body_here() -> None:
    """A new queue function must get its valid body above, or it escapes these tests."""
    assert set(queue_functions()) == set(valid_bodies())


def poison_bodies(queue: str) -> list[bytes]:
    from shared import settings

    client = storage.queue_client(settings.resolve_placeholders(queue) + "-poison")
    try:
        return [m.content or b"" for m in client.peek_messages(max_messages=32)]
    except Exception:
        return []


@pytest.mark.parametrize(
    ("function_name", "case", "body"),
    [pytest.param(f, c, b, id=f"{f}: {c}") for f, c, b in hostile_cases()],
)
def test_a_hostile_body_is_poisoned_at_once_or_handled_and_never_raises(
    app_env: dict[str, str],
    caplog: pytest.LogCaptureFixture,
    function_name: str,
    case: str,
    body: bytes,
) -> None:
    function, queue = queue_functions()[function_name]
    msg = QueueMessage(id=f"hostile-{uuid.uuid4().hex[:8]}", body=body, dequeue_count=1)
    with caplog.at_level(logging.WARNING):
        function(msg)  # must not raise: raising costs 5 attempts of what cannot succeed
    poisoned = body in poison_bodies(queue)
    if case in GENERIC_BODIES or "surrogate" in case:
        assert poisoned, "a body no function can run must go to the poison queue at once"
    if poisoned:
        assert any(msg.id in r.getMessage() for r in caplog.records), "reason not logged"
