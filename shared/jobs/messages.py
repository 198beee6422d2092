"""The queue messages: one unit (which job, which unit, how many units, its payload), and the
request to announce a finished job.

A payload that would push the message over the queue's 64 KB limit (48 KB before the
host's base64 encoding) is stored in a blob and the message carries `payload_ref` instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from blobsingleton.errors import InvalidKey

from shared.jobs.errors import InvalidAnnounceMessage, InvalidUnitMessage
from shared.jobs.layout import validate_id
from shared.json_body import InvalidBody, parse_object

#: 64 KiB queue limit on the base64 text: 48 KiB of raw message, less room for the envelope.
MAX_MESSAGE_BYTES = 48 * 1024 - 512
_ABSENT = object()


def encode_payload(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


@dataclass(frozen=True)
class UnitMessage:
    job_id: str
    unit_id: str
    total: int
    payload: Any = None
    payload_ref: bool = False  # True: the payload is in the job's payloads/{unit} blob

    def to_bytes(self) -> bytes:
        data: dict[str, Any] = {"job_id": self.job_id, "unit_id": self.unit_id, "total": self.total}
        if self.payload_ref:
            data["payload_ref"] = True
        else:
            data["payload"] = self.payload
        return json.dumps(data, separators=(",", ":")).encode()

    def fits(self) -> bool:
        return len(self.to_bytes()) <= MAX_MESSAGE_BYTES

    @classmethod
    def parse(cls, body: bytes | str) -> UnitMessage:
        try:
            data = parse_object(body, max_bytes=MAX_MESSAGE_BYTES)
        except InvalidBody as error:
            raise InvalidUnitMessage(error.describe()) from None
        try:
            job_id = validate_id(data.get("job_id"))
            unit_id = validate_id(data.get("unit_id"))
        except InvalidKey as error:
            raise InvalidUnitMessage(f"bad job_id or unit_id: {error.reason}") from error
        total = data.get("total")
        if not isinstance(total, int) or isinstance(total, bool) or total < 1:
            raise InvalidUnitMessage("total must be a positive integer")
        payload = data.get("payload", _ABSENT)
        by_ref = data.get("payload_ref") is True
        if payload is _ABSENT and not by_ref:
            raise InvalidUnitMessage("has neither payload nor payload_ref")
        return cls(job_id, unit_id, total, None if by_ref else payload, by_ref)


@dataclass(frozen=True)
class AnnounceMessage:
    """The queue message that asks for a finished job's announcement (and archive): sent by
    a zero-unit submission and by the watcher, so no callback is ever POSTed inside an HTTP
    request or inside the watcher's sweep."""

    job_id: str

    def to_bytes(self) -> bytes:
        return json.dumps({"job_id": self.job_id}, separators=(",", ":")).encode()

    @classmethod
    def parse(cls, body: bytes | str) -> AnnounceMessage:
        try:
            data = parse_object(body, max_bytes=1024, max_elements=4)
        except InvalidBody as error:
            raise InvalidAnnounceMessage(error.describe()) from None
        try:
            return cls(validate_id(data.get("job_id")))
        except InvalidKey as error:
            raise InvalidAnnounceMessage(f"bad job_id: {error.reason}") from error
