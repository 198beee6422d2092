"""A job request as submitted over HTTP, validated before anything is stored.

    {"job_id": "optional, generated if absent",
     "units": [{"id": "unit-1", "payload": <any JSON>}, ...],
     "callback_url": "https://receiver.example.com/jobs/done"}

or, for a definition too large for a request body, `"units_blob": "name"` in place of
`units`: a JSON Lines blob in JOB_DEFINITIONS_CONTAINER, streamed (shared.jobs.definitions).

Every problem is reported (up to MAX_PROBLEMS) with its JSON path, so a client fixes its
request in one round trip. Zero units is valid: the job completes at once.

Size. A body is at most MAX_REQUEST_BYTES (4 MiB: 10,000 small units) and MAX_REQUEST_VALUES
JSON values, counted before anything is decoded (shared.json_body): about 25 MB of Python
objects at most, so a 2 GB instance serves dozens of such requests at once. The function
refuses a larger `Content-Length` before it reads the body (413).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator, Sized
from dataclasses import dataclass, field
from typing import Any, Protocol

from blobsingleton.errors import InvalidKey

from shared.jobs.callback_url import CallbackPolicy, Resolver, check_callback_url, resolve
from shared.jobs.config import JobSettings
from shared.jobs.definitions import read_definition
from shared.jobs.errors import BlockedCallback, InvalidJob, Problem
from shared.jobs.layout import validate_id
from shared.jobs.messages import encode_payload
from shared.jobs.records import UnitSpec
from shared.json_body import InvalidBody, parse_object

#: One unit's payload, JSON-encoded; larger ones would make a job record unwieldy.
MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_PROBLEMS = 20
#: The whole request body, and the JSON values in it (see the module's doc).
MAX_REQUEST_BYTES = 4 * 1024 * 1024
MAX_REQUEST_VALUES = 100_000


class UnitSource(Sized, Protocol):
    """A job's units in order: a list (inline), or a definition blob read again."""

    def __iter__(self) -> Iterator[UnitSpec]: ...


@dataclass(frozen=True)
class JobRequest:
    job_id: str
    units: UnitSource
    callback_url: str
    unit_ids: list[str] = field(default_factory=list)
    digest: str = ""  # what identifies the units: for a blob, the SHA-256 of its bytes

    def fingerprint(self) -> str:
        """What must match for a repeated submission of the same job id to be the same job."""
        if self.digest:
            canonical = json.dumps({"units_blob_sha256": self.digest, "callback_url":
                                    self.callback_url}, sort_keys=True)  # fmt: skip
        else:
            units = [[u.id, u.payload] for u in self.units]
            canonical = json.dumps(
                {"units": units, "callback_url": self.callback_url},
                sort_keys=True,
                separators=(",", ":"),
            )
        return hashlib.sha256(canonical.encode()).hexdigest()

    @classmethod
    def parse(
        cls,
        body: bytes | str,
        *,
        max_units: int,
        resolver: Resolver = resolve,
        policy: CallbackPolicy | None = None,
        settings: JobSettings | None = None,
    ) -> JobRequest:
        """The request in `body`, or `InvalidJob` listing what is wrong with it. `policy`
        (default: the app settings') says which callback receivers are allowed; `settings`
        name the definitions container, read only for a `units_blob` request."""
        try:
            data = parse_object(body, max_bytes=MAX_REQUEST_BYTES, max_elements=MAX_REQUEST_VALUES)
        except InvalidBody as error:
            raise InvalidJob([Problem("$", error.describe())]) from None
        problems: list[Problem] = []
        job_id = _job_id(data.get("job_id"), problems)
        policy = policy if policy is not None else CallbackPolicy.from_env()
        callback_url = _callback_url(data.get("callback_url"), resolver, policy, problems)
        if "units_blob" in data:
            if "units" in data:
                problems.append(Problem("units", "give either units or units_blob, not both"))
                raise InvalidJob(problems[:MAX_PROBLEMS])
            if problems:  # nothing is read while the rest of the request is wrong
                raise InvalidJob(problems[:MAX_PROBLEMS])
            settings = settings or JobSettings.from_env()
            found = read_definition(
                data["units_blob"], max_units, problems,
                container=settings.definitions_container, connection=settings.connection,
                max_problems=MAX_PROBLEMS,
            )  # fmt: skip
            if found is None:
                raise InvalidJob(problems[:MAX_PROBLEMS])
            blob_units, ids = found
            return cls(job_id, blob_units, callback_url, ids, blob_units.digest)
        units = _units(data.get("units"), max_units, problems)
        if problems:
            raise InvalidJob(problems[:MAX_PROBLEMS])
        return cls(job_id, units, callback_url, [u.id for u in units])


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


def _callback_url(
    value: Any, resolver: Resolver, policy: CallbackPolicy, problems: list[Problem]
) -> str:
    try:
        return check_callback_url(value, resolver=resolver, policy=policy).url
    except BlockedCallback as error:
        problems.append(Problem("callback_url", str(error)))
        return ""
