"""The import queue message: which account, which night, which run.

    {"account": "acme", "run_date": "2026-11-22", "run_id": "2026-11-22", "trigger": "nightly"}

The nightly fan-out uses the run date as run id, so every instance's fan-out names the same
run. A manual run (HTTP) gets `{date}-manual-{8 hex}`: it must not be swallowed by the
night's completed run-once record. A run started by a file's arrival (the blob trigger) gets
`{date}-arrival-{8 hex}`, the hex from the file's version (`shared.imports.arrivals`), so
every delivery of one version's event names the same run.
"""

from __future__ import annotations

import re
import uuid
from datetime import date
from typing import Annotated, Literal, Self

from pydantic import AfterValidator, model_validator

from shared.imports.accounts import InvalidAccount, validate_account
from shared.models import MessageModel, Problem, fail_at, rule

_RUN_ID = re.compile(r"\d{4}-\d{2}-\d{2}(?:-(?:manual|arrival)-[0-9a-f]{8})?")
TRIGGERS = ("nightly", "manual", "arrival")
MAX_BODY_BYTES = 4096


class InvalidImportRequest(ValueError):
    """A queue message that is not a valid import request."""


def _account(value: str) -> str:
    try:
        return validate_account(value)
    except InvalidAccount as error:
        raise rule(error.reason) from None


def _run_date(value: str) -> str:
    try:
        date.fromisoformat(value)
    except ValueError:
        raise rule("must be a date, YYYY-MM-DD") from None
    return value


def _run_id(value: str) -> str:
    if not _RUN_ID.fullmatch(value):
        raise rule("must be YYYY-MM-DD[-manual-xxxxxxxx | -arrival-xxxxxxxx]")
    return value


class ImportRequest(MessageModel):
    """The import queue message (see the module's doc); unknown fields are refused."""

    error = InvalidImportRequest
    max_bytes = MAX_BODY_BYTES

    account: Annotated[str, AfterValidator(_account)]
    run_date: Annotated[str, AfterValidator(_run_date)]
    run_id: Annotated[str, AfterValidator(_run_id)]
    trigger: Literal["nightly", "manual", "arrival"] = "nightly"

    @model_validator(mode="after")
    def _run_of_its_date(self) -> Self:
        if not self.run_id.startswith(self.run_date):
            fail_at(("run_id",), "must start with run_date")
        return self

    @classmethod
    def invalid(cls, problems: list[Problem]) -> Exception:
        return InvalidImportRequest("; ".join(p.describe() for p in problems))

    @classmethod
    def nightly(cls, account: str, run_date: date) -> ImportRequest:
        day = run_date.isoformat()
        return cls(account=account, run_date=day, run_id=day, trigger="nightly")

    @classmethod
    def manual(cls, account: str, today: date) -> ImportRequest:
        day = today.isoformat()
        run_id = f"{day}-manual-{uuid.uuid4().hex[:8]}"
        return cls(account=account, run_date=day, run_id=run_id, trigger="manual")

    @classmethod
    def arrival(cls, account: str, today: date, version: str) -> ImportRequest:
        """The run a file's arrival starts: `version` (hex) names the file's version."""
        day = today.isoformat()
        return cls(account=account, run_date=day, run_id=f"{day}-arrival-{version[:8]}",
                   trigger="arrival")  # fmt: skip

    def to_json(self) -> str:
        return self.model_dump_json()
