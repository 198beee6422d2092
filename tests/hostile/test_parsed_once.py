"""A queue message is decoded once, within its kind's bound, before its model sees it."""

from __future__ import annotations

import json
from typing import Any

import azure.functions as func
import pytest
from azure.functions.meta import Datum
from blobsingleton.errors import InvalidRequest

from shared import poison
from shared.imports.request import ImportRequest, InvalidImportRequest
from shared.jobs.errors import InvalidAnnounceMessage, InvalidJob, InvalidUnitMessage
from shared.jobs.messages import AnnounceMessage, UnitMessage
from shared.json_body import MAX_DEPTH
from shared.models import InvalidMessage, MessageModel, Problem
from shared.notifications import InvalidNotification, Notification

NOTIFICATION = {"event_id": "evt-1", "type": "order.shipped", "to": "someone@example.com",
                "subject": "Shipped", "text": "Your order has shipped."}  # fmt: skip
DEEP = b'{"a":' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1)


def queue_message(body: bytes) -> func.QueueMessage:
    """As the worker builds it: the azure-functions converter, with trigger metadata shaped as
    the host sends it (Azure/azure-functions-python-library, tests/test_queue.py,
    test_queue_message_in_converter_decode)."""
    metadata = {"Id": Datum("m1", "string"), "DequeueCount": Datum(1, "int"),
                "PopReceipt": Datum("receipt", "string")}  # fmt: skip
    message: func.QueueMessage = func.queue.QueueMessageInConverter.decode(
        Datum(body, "bytes"), trigger_metadata=metadata
    )
    return message


def test_admit_decodes_a_message_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host-metadata screen reads the same decoded body the model validates (it decoded
    the body a second time, unbounded)."""
    calls = []
    loads = json.loads

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return loads(*args, **kwargs)

    monkeypatch.setattr(json, "loads", counted)
    msg = queue_message(json.dumps(NOTIFICATION).encode())
    notification = poison.admit(msg, "%NOTIFICATIONS_QUEUE%", Notification)
    assert notification is not None and notification.event_id == "evt-1"
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("model", "error", "body", "reason"),
    [
        (Notification, InvalidNotification, DEEP, f"nested more than {MAX_DEPTH} levels deep"),
        (ImportRequest, InvalidImportRequest, json.dumps({"account": "a" * 5000}).encode(),
         "the limit is 4096"),
        (AnnounceMessage, InvalidAnnounceMessage, b'{"job_id": "j", "more": [1, 2, 3]}',
         "holds more than 4 JSON values"),
    ],
)  # fmt: skip
def test_a_body_past_its_bound_never_reaches_its_model(
    monkeypatch: pytest.MonkeyPatch,
    model: type[MessageModel],
    error: type[Exception],
    body: bytes,
    reason: str,
) -> None:
    def refused(*args: object, **kwargs: object) -> object:
        raise AssertionError("the model saw a body past its bound")

    monkeypatch.setattr(model, "model_validate", refused)
    with pytest.raises(error, match=reason):
        model.parse(body)


def test_every_model_raises_the_error_its_callers_catch() -> None:
    """`poison.admit` catches `model.error`: a kind whose `invalid` built another would make
    the host retry a body that can never succeed, five times, instead of poisoning it."""
    from shared.jobs.definitions import DefinitionLine
    from shared.jobs.request import JobSubmission
    from shared.ops import ActionRequest

    kinds = [Notification, ImportRequest, UnitMessage, AnnounceMessage, JobSubmission,
             DefinitionLine, ActionRequest]  # fmt: skip
    for kind in kinds:
        assert isinstance(kind.invalid([Problem("", "is wrong")]), kind.error), kind
    assert {kind.error for kind in kinds} == {
        InvalidNotification, InvalidImportRequest, InvalidUnitMessage, InvalidAnnounceMessage,
        InvalidJob, InvalidMessage, InvalidRequest,
    }  # fmt: skip
