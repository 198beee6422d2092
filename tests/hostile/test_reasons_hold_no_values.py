"""A bad message's reason names the field and the rule, never the value it held.

Bodies carry health data (names, birth dates), and a reason ends up in a log line, a poison
reason and a 400. The message models (shared.models) are pydantic's, whose own error text
quotes the input (`input_value='Ada Lovelace ...'`): every reason here is checked against a
value planted in each field of each kind of message, wrong in each way a model can refuse it.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import azure.functions as func
import pytest
from azure.functions.meta import Datum
from blobsingleton.errors import InvalidRequest
from pydantic import ValidationError

import function_app
from shared import storage
from shared.imports.request import ImportRequest, InvalidImportRequest
from shared.jobs import InvalidJob, JobRequest
from shared.jobs.callback_url import CallbackPolicy, parse_networks
from shared.jobs.definitions import DefinitionLine
from shared.jobs.errors import InvalidAnnounceMessage, InvalidUnitMessage
from shared.jobs.messages import AnnounceMessage, UnitMessage
from shared.models import InvalidMessage, MessageModel, Problem, problems_of
from shared.notifications import InvalidNotification, Notification
from shared.ops import ActionRequest
from shared.settings import resolve_placeholders
from tests.support import fresh_functions

#: What a field may hold that must never be repeated: a name and a birth date.
NAME, BORN = "Lovelace", "1815-12-10"
SECRET = f"Ada {NAME} {BORN}"
ADDRESS = "ada.lovelace@example.com"
LEAKS = (NAME, BORN, "1815", ADDRESS, "input_value", "input_type")

#: The secret, wrong in every way a field can be: a type, a length, a character, a syntax.
WRONG: dict[str, Any] = {
    "text": SECRET,
    "line break": SECRET + "\n",
    "path": f"../{SECRET}",
    "too long": SECRET * 200,
    "address-like": f"{SECRET}@",
    "array": [SECRET],
    "object": {SECRET: SECRET},
    "number": 18151210,
    "boolean": True,
    "null": None,
}

VALID: dict[str, tuple[type[MessageModel], dict[str, Any]]] = {
    "notification": (Notification, {
        "event_id": "evt-1", "type": "order.shipped", "to": ["someone@example.com"],
        "subject": "Shipped", "text": "Your order has shipped.",
    }),
    "notification template": (Notification, {
        "event_id": "evt-1", "type": "order.shipped", "to": "someone@example.com",
        "subject": "Shipped", "template_id": "d-1", "template_data": {"name": "x"},
    }),
    "import request": (ImportRequest, {
        "account": "acme", "run_date": "2026-11-22", "run_id": "2026-11-22", "trigger": "nightly",
    }),
    "job unit message": (UnitMessage, {"job_id": "j", "unit_id": "u", "total": 1, "payload": 1}),
    "job unit by reference": (UnitMessage, {"job_id": "j", "unit_id": "u", "total": 2,
                                            "payload_ref": True}),
    "announce message": (AnnounceMessage, {"job_id": "j"}),
    "definition line": (DefinitionLine, {"id": "u1", "payload": {"n": 1}}),
    "ops break or reset": (ActionRequest, {"reason": "holder hung at 02:30"}),
}  # fmt: skip

ERRORS = (InvalidNotification, InvalidImportRequest, InvalidUnitMessage, InvalidAnnounceMessage,
          InvalidMessage, InvalidJob, InvalidRequest)  # fmt: skip


def bodies() -> Iterator[tuple[str, type[MessageModel], bytes]]:
    for kind, (model, valid) in VALID.items():
        for field in valid:
            for how, value in WRONG.items():
                yield (
                    f"{kind}: {field} = {how}",
                    model,
                    json.dumps({**valid, field: value}).encode(),
                )
        yield (
            f"{kind}: a field named like an address",
            model,
            json.dumps({**valid, ADDRESS: SECRET}).encode(),
        )
        yield (
            f"{kind}: a field named like a person",
            model,
            json.dumps({**valid, SECRET: 1}).encode(),
        )


def words(error: Exception) -> str:
    """Everything an error says: its text, and each problem's field and reason."""
    found: list[Problem] = list(getattr(error, "problems", []))
    return " | ".join([str(error), *(f"{p.field} {p.message}" for p in found)])


@pytest.mark.parametrize(("model", "body"), [pytest.param(m, b, id=c) for c, m, b in bodies()])
def test_a_reason_never_holds_the_value(model: type[MessageModel], body: bytes) -> None:
    try:
        model.parse(body)
    except ERRORS as error:
        said = words(error)
        assert not [leak for leak in LEAKS if leak in said], said
        assert said.strip(" |"), "a reason says what is wrong"


def test_the_planted_values_are_refused() -> None:
    """The test above checks reasons: most of its bodies must be refused to give one."""
    refused = 0
    for _, model, body in bodies():
        try:
            model.parse(body)
        except ERRORS:
            refused += 1
    assert refused > 0.7 * len(list(bodies()))


def test_a_job_request_names_its_bad_units_without_their_values() -> None:
    policy = CallbackPolicy(parse_networks("127.0.0.0/8", "test"), allow_http=True)
    units = [{"id": value, "payload": SECRET} for value in WRONG.values()]
    units.append({"id": "big", "payload": SECRET * 60_000})
    body = {"job_id": f"../{SECRET}", "units": units, "callback_url": "http://127.0.0.1:9/cb",
            ADDRESS: SECRET}  # fmt: skip
    with pytest.raises(InvalidJob) as caught:
        JobRequest.parse(json.dumps(body), max_units=100, policy=policy)
    said = words(caught.value)
    assert not [leak for leak in LEAKS if leak in said], said
    fields = {p.field for p in caught.value.problems}
    assert {"job_id", "units[1].id", "units[2].id", "units[9].id", "units[10].payload"} <= fields


def test_pydantic_words_are_translated_without_the_input() -> None:
    """pydantic's own error text quotes the input; the problems built from it do not, and
    its text is hidden too (`hide_input_in_errors`) for a model built directly."""
    with pytest.raises(ValidationError) as caught:
        ImportRequest(account=SECRET, run_date=SECRET, run_id=SECRET, trigger=SECRET)  # type: ignore[arg-type]
    assert not [leak for leak in LEAKS if leak in str(caught.value)], str(caught.value)
    problems = problems_of(caught.value)
    assert [p.field for p in problems] == ["account", "run_date", "run_id", "trigger"]
    assert problems[3].message == "must be one of 'nightly', 'manual' or 'arrival'"
    said = " ".join(p.describe() for p in problems)
    assert not [leak for leak in LEAKS if leak in said], said


# -- through the queue functions: the poison reason and every log line ------------------------


def queue_message(body: bytes) -> func.QueueMessage:
    """The message as the worker builds it: the azure-functions converter, from the body and
    trigger metadata shaped as the host sends them (Azure/azure-functions-python-library,
    tests/test_queue.py, test_queue_message_in_converter_decode)."""
    metadata = {
        "Id": Datum(f"leak-{uuid.uuid4().hex[:8]}", "string"),
        "DequeueCount": Datum(1, "int"),
        "ExpirationTime": Datum("2026-12-12T03:16:34Z", "string"),
        "InsertionTime": Datum("2026-11-12T03:16:34Z", "string"),
        "NextVisibleTime": Datum("2026-11-12T03:16:34Z", "string"),
        "PopReceipt": Datum("receipt", "string"),
    }
    message: func.QueueMessage = func.queue.QueueMessageInConverter.decode(
        Datum(body, "bytes"), trigger_metadata=metadata
    )
    return message


def poisoned(queue: str) -> list[bytes]:
    client = storage.queue_client(resolve_placeholders(queue) + "-poison")
    return [m.content or b"" for m in client.peek_messages(max_messages=32)]


@pytest.mark.services
@pytest.mark.parametrize(
    ("function_name", "body", "named"),
    [
        ("send_notification", {**VALID["notification"][1], "to": [f"{SECRET}@"]}, "to[0]"),
        ("send_notification", {**VALID["notification"][1], "subject": SECRET + "\n"}, "subject"),
        ("import_account", {**VALID["import request"][1], "run_date": SECRET}, "run_date"),
        ("import_account", {**VALID["import request"][1], "account": f"../{SECRET}"}, "account"),
        ("run_job_unit", {**VALID["job unit message"][1], "total": SECRET}, "total"),
    ],
)
def test_the_poison_reason_and_the_log_name_the_field_never_the_value(
    app_env: dict[str, str],
    caplog: pytest.LogCaptureFixture,
    function_name: str,
    body: dict[str, Any],
    named: str,
) -> None:
    found = {}
    for function in fresh_functions(function_app.app).values():
        trigger = function.get_trigger().get_dict_repr()
        if trigger["type"] == "queueTrigger":
            found[function.get_function_name()] = (function.get_user_function(),
                                                   trigger["queueName"])  # fmt: skip
    run, queue = found[function_name]
    raw = json.dumps(body).encode()
    msg = queue_message(raw)
    with caplog.at_level(logging.DEBUG):
        run(msg)
    assert raw in poisoned(queue), "an invalid message goes to the poison queue at once"
    [reason] = [r.getMessage() for r in caplog.records if msg.id in r.getMessage()]
    assert f"{named}: " in reason, reason
    every_line = "\n".join(r.getMessage() for r in caplog.records)
    assert not [leak for leak in LEAKS if leak in every_line], every_line
