"""The queue messages: one unit (which job, which unit, how many units, its payload), and the
request to announce a finished job.

A payload that would push the message over the queue's 64 KB limit (48 KB before the
host's base64 encoding) is stored in a blob and the message carries `payload_ref` instead.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Self

from blobsingleton.errors import InvalidKey
from pydantic import AfterValidator, ConfigDict, Field, model_validator

from shared.jobs.errors import InvalidAnnounceMessage, InvalidUnitMessage
from shared.jobs.layout import validate_id
from shared.models import MessageModel, Problem, rule

#: 64 KiB queue limit on the base64 text: 48 KiB of raw message, less room for the envelope.
MAX_MESSAGE_BYTES = 48 * 1024 - 512
#: One unit's payload, JSON-encoded; larger ones would make a job record unwieldy.
MAX_PAYLOAD_BYTES = 1024 * 1024


def encode_payload(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


def _id(value: str) -> str:
    try:
        return validate_id(value)
    except InvalidKey as error:
        raise rule(error.reason) from None


#: A job or unit id usable in blob names (`shared.jobs.layout.validate_id`).
Id = Annotated[str, AfterValidator(_id)]


def _payload(value: Any) -> Any:
    if len(encode_payload(value)) > MAX_PAYLOAD_BYTES:
        raise rule(f"is larger than {MAX_PAYLOAD_BYTES} bytes as JSON")
    return value


class JobUnit(MessageModel):
    """One unit of a job definition, `{"id": ..., "payload": <any JSON>}`: an item of a
    request's `units`, or a line of a units blob (shared.jobs.definitions). Other fields are
    ignored."""

    model_config = ConfigDict(extra="ignore")

    id: Id
    payload: Annotated[Any, AfterValidator(_payload)] = None


class UnitMessage(MessageModel):
    """One unit's queue message. Fields it does not know are ignored (a newer writer's)."""

    model_config = ConfigDict(extra="ignore")
    error = InvalidUnitMessage
    max_bytes = MAX_MESSAGE_BYTES

    job_id: Id
    unit_id: Id
    total: Annotated[int, Field(ge=1)]
    payload: Any = None
    payload_ref: bool = False  # True: the payload is in the job's payloads/{unit} blob

    @model_validator(mode="after")
    def _carries_its_payload(self) -> Self:
        if self.payload_ref:
            object.__setattr__(self, "payload", None)
        elif "payload" not in self.model_fields_set:
            raise rule("has neither payload nor payload_ref")
        return self

    @classmethod
    def invalid(cls, problems: list[Problem]) -> Exception:
        return InvalidUnitMessage("; ".join(p.describe() for p in problems))

    def to_bytes(self) -> bytes:
        data: dict[str, Any] = {"job_id": self.job_id, "unit_id": self.unit_id, "total": self.total}
        if self.payload_ref:
            data["payload_ref"] = True
        else:
            data["payload"] = self.payload
        return json.dumps(data, separators=(",", ":")).encode()

    def fits(self) -> bool:
        return len(self.to_bytes()) <= MAX_MESSAGE_BYTES


class AnnounceMessage(MessageModel):
    """The queue message that asks for a finished job's announcement (and archive): sent by
    a zero-unit submission and by the watcher, so no callback is ever POSTed inside an HTTP
    request or inside the watcher's sweep."""

    model_config = ConfigDict(extra="ignore")
    error = InvalidAnnounceMessage
    max_bytes = 1024
    max_elements = 4

    job_id: Id

    @classmethod
    def invalid(cls, problems: list[Problem]) -> Exception:
        return InvalidAnnounceMessage("; ".join(p.describe() for p in problems))

    def to_bytes(self) -> bytes:
        return json.dumps({"job_id": self.job_id}, separators=(",", ":")).encode()
