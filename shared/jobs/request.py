"""A job request as submitted over HTTP, validated before anything is stored.

    {"job_id": "optional, generated if absent",
     "units": [{"id": "unit-1", "payload": <any JSON>}, ...],
     "callback_url": "https://receiver.example.com/jobs/done"}

Every problem is reported (up to MAX_PROBLEMS) with its JSON path, so a client fixes its
request in one round trip. Zero units is valid: the job completes at once.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from typing import Any

from blobsingleton.errors import InvalidKey

from shared.jobs.callback_url import Resolver, check_callback_url, resolve
from shared.jobs.errors import BlockedCallback, InvalidJob, Problem
from shared.jobs.layout import validate_id
from shared.jobs.messages import encode_payload
from shared.json_body import InvalidBody, parse_object

#: One unit's payload, JSON-encoded; larger ones would make a job record unwieldy.
MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_PROBLEMS = 20
#: The whole request; the Functions host itself refuses HTTP bodies over 100 MB.
MAX_REQUEST_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class UnitSpec:
    id: str
    payload: Any = None


@dataclass(frozen=True)
class JobRequest:
    job_id: str
    units: list[UnitSpec]
    callback_url: str

    @property
    def unit_ids(self) -> list[str]:
        return [u.id for u in self.units]

    def fingerprint(self) -> str:
        """What must match for a repeated submission of the same job id to be the same job."""
        canonical = json.dumps(
            {"units": [[u.id, u.payload] for u in self.units], "callback_url": self.callback_url},
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(canonical.encode()).hexdigest()

    @classmethod
    def parse(
        cls, body: bytes | str, *, max_units: int, resolver: Resolver = resolve
    ) -> JobRequest:
        """The request in `body`, or `InvalidJob` listing what is wrong with it."""
        try:
            data = parse_object(body, max_bytes=MAX_REQUEST_BYTES)
        except InvalidBody as error:
            raise InvalidJob([Problem("$", error.describe())]) from None
        problems: list[Problem] = []
        job_id = _job_id(data.get("job_id"), problems)
        units = _units(data.get("units"), max_units, problems)
        callback_url = _callback_url(data.get("callback_url"), resolver, problems)
        if problems:
            raise InvalidJob(problems[:MAX_PROBLEMS])
        return cls(job_id, units, callback_url)


def _job_id(value: Any, problems: list[Problem]) -> str:
    if value is None:
        return uuid.uuid4().hex
    try:
        return validate_id(value)
    except InvalidKey as error:
        problems.append(Problem("job_id", error.reason))
        return ""


def _units(value: Any, max_units: int, problems: list[Problem]) -> list[UnitSpec]:
    if not isinstance(value, list):
        problems.append(Problem("units", "must be a list of {id, payload} objects"))
        return []
    if len(value) > max_units:
        problems.append(Problem("units", f"has {len(value)} units, the limit is {max_units}"))
        return []
    units: list[UnitSpec] = []
    seen: set[str] = set()
    for index, item in enumerate(value):
        where = f"units[{index}]"
        if len(problems) >= MAX_PROBLEMS:
            break
        if not isinstance(item, dict):
            problems.append(Problem(where, "must be an object with an id"))
            continue
        try:
            unit_id = validate_id(item.get("id"))
        except InvalidKey as error:
            problems.append(Problem(f"{where}.id", error.reason))
            continue
        if unit_id in seen:
            problems.append(Problem(f"{where}.id", f"duplicate unit id {unit_id!r}"))
            continue
        seen.add(unit_id)
        payload = item.get("payload")
        if len(encode_payload(payload)) > MAX_PAYLOAD_BYTES:
            problems.append(
                Problem(f"{where}.payload", f"is larger than {MAX_PAYLOAD_BYTES} bytes as JSON")
            )
            continue
        units.append(UnitSpec(unit_id, payload))
    return units


def _callback_url(value: Any, resolver: Resolver, problems: list[Problem]) -> str:
    try:
        return check_callback_url(value, resolver=resolver).url
    except BlockedCallback as error:
        problems.append(Problem("callback_url", str(error)))
        return ""
