"""A job request as submitted over HTTP, validated before anything is stored.

    {"job_id": "optional, generated if absent",
     "units": [{"id": "unit-1", "payload": <any JSON>}, ...],
     "callback_url": "https://receiver.example.com/jobs/done"}

or, for a definition too large for a request body, `"units_blob": "name"` in place of
`units`: a JSON Lines blob in JOB_DEFINITIONS_CONTAINER, streamed (shared.jobs.definitions).

The body is the model `JobSubmission` (shared.models), each unit a `JobUnit`. Every problem is
reported (up to MAX_PROBLEMS) with its JSON path, so a client fixes its request in one round
trip. Zero units is valid: the job completes at once.

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
from typing import Annotated, Any, Protocol

from pydantic import (
    AfterValidator,
    ConfigDict,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    model_validator,
)

from shared.jobs.callback_url import CallbackPolicy, Resolver, check_callback_url, resolve
from shared.jobs.config import JobSettings
from shared.jobs.definitions import read_definition
from shared.jobs.errors import BlockedCallback, InvalidJob, Problem
from shared.jobs.messages import Id, JobUnit
from shared.jobs.records import UnitSpec
from shared.models import MessageModel, at, raise_together, rule

MAX_PROBLEMS = 20
#: The whole request body, and the JSON values in it (see the module's doc).
MAX_REQUEST_BYTES = 4 * 1024 * 1024
MAX_REQUEST_VALUES = 100_000


class UnitSource(Sized, Protocol):
    """A job's units in order: a list (inline), or a definition blob read again."""

    def __iter__(self) -> Iterator[UnitSpec]: ...


def _units(value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
    """The units, each a `JobUnit`: at most `max_units` (the context's; none validated
    beyond it) and no id twice, reported beside the units' own problems."""
    limit = (info.context or {}).get("max_units")
    if isinstance(value, list) and limit is not None and len(value) > limit:
        raise rule(f"has {len(value)} units, the limit is {limit}")
    try:
        units: list[JobUnit] = handler(value)
    except ValidationError as error:
        bad = {d["loc"][0] for d in error.errors() if d["loc"]}
        items = value if isinstance(value, list) else []
        ids = [(i, item.get("id")) for i, item in enumerate(items) if i not in bad]
        raise_together(error, _duplicates(ids))
    raise_together(None, _duplicates([(i, unit.id) for i, unit in enumerate(units)]))
    return units


def _duplicates(ids: list[tuple[int, object]]) -> list[Any]:
    seen: set[object] = set()
    found = []
    for index, unit_id in ids:
        if unit_id in seen:
            found.append(at((index, "id"), f"duplicate unit id {unit_id!r}"))
        seen.add(unit_id)
    return found


def _callback(value: str, info: ValidationInfo) -> str:
    """A receiver the policy allows (the context's `policy` and `resolver`)."""
    context = info.context or {}
    policy = context.get("policy") or CallbackPolicy.from_env()
    try:
        return check_callback_url(value, resolver=context.get("resolver", resolve),
                                  policy=policy).url  # fmt: skip
    except BlockedCallback as error:
        raise rule(str(error)) from None


class JobSubmission(MessageModel):
    """The body of `POST /api/jobs` (see the module's doc); other fields are ignored.
    Validated with the context `{"max_units": ..., "policy": ..., "resolver": ...}`."""

    model_config = ConfigDict(extra="ignore")
    error = InvalidJob
    max_bytes = MAX_REQUEST_BYTES
    max_elements = MAX_REQUEST_VALUES

    job_id: Id | None = None
    units: Annotated[list[JobUnit], WrapValidator(_units)] | None = None
    units_blob: str | None = None  # its name; read_definition checks it and reads it
    callback_url: Annotated[str, AfterValidator(_callback)]

    @model_validator(mode="wrap")
    @classmethod
    def _units_or_blob(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """Exactly one of units and units_blob, said beside the other fields' problems."""
        more = []
        if isinstance(data, dict):
            if "units" in data and "units_blob" in data:
                more.append(at(("units",), "give either units or units_blob, not both"))
            elif "units" not in data and "units_blob" not in data:
                more.append(at(("units",), "is missing: give units or units_blob"))
        try:
            found = handler(data)
        except ValidationError as error:
            raise_together(error, more)
        raise_together(None, more)
        return found

    @classmethod
    def invalid(cls, problems: list[Problem]) -> Exception:
        found = [Problem(p.field, p.message) if p.field else Problem("$", p.describe())
                 for p in problems]  # fmt: skip
        return InvalidJob(found[:MAX_PROBLEMS])


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
        policy = policy if policy is not None else CallbackPolicy.from_env()
        context = {"max_units": max_units, "resolver": resolver, "policy": policy}
        submission = JobSubmission.parse(body, context=context)
        job_id = submission.job_id or uuid.uuid4().hex
        if submission.units is None:
            settings = settings or JobSettings.from_env()
            problems: list[Problem] = []
            found = read_definition(
                submission.units_blob, max_units, problems,
                container=settings.definitions_container, connection=settings.connection,
                max_problems=MAX_PROBLEMS,
            )  # fmt: skip
            if found is None:
                raise InvalidJob(problems[:MAX_PROBLEMS])
            blob_units, ids = found
            return cls(job_id, blob_units, submission.callback_url, ids, blob_units.digest)
        units = [UnitSpec(unit.id, unit.payload) for unit in submission.units]
        return cls(job_id, units, submission.callback_url, [u.id for u in units])
