"""The import queue message: which account, which night, which run.

    {"account": "acme", "run_date": "2026-11-22", "run_id": "2026-11-22", "trigger": "nightly"}

The nightly fan-out uses the run date as run id, so every instance's fan-out names the same
run. A manual run (HTTP) gets `{date}-manual-{8 hex}`: it must not be swallowed by the
night's completed run-once record. A run started by a file's arrival (the blob trigger) gets
`{date}-arrival-{8 hex}`, the hex from the file's version (`shared.imports.arrivals`), so
every delivery of one version's event names the same run.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import asdict, dataclass
from datetime import date

from shared.imports.accounts import InvalidAccount, validate_account
from shared.json_body import InvalidBody, parse_object

_RUN_ID = re.compile(r"\d{4}-\d{2}-\d{2}(?:-(?:manual|arrival)-[0-9a-f]{8})?")
TRIGGERS = ("nightly", "manual", "arrival")
MAX_BODY_BYTES = 4096


class InvalidImportRequest(ValueError):
    """A queue message that is not a valid import request."""


@dataclass(frozen=True)
class ImportRequest:
    account: str
    run_date: str
    run_id: str
    trigger: str = "nightly"

    def __post_init__(self) -> None:
        try:
            validate_account(self.account)
        except InvalidAccount as error:
            raise InvalidImportRequest(f"account: {error.reason}") from None
        try:
            date.fromisoformat(self.run_date)
        except (TypeError, ValueError):
            raise InvalidImportRequest("run_date: must be a date, YYYY-MM-DD") from None
        if not isinstance(self.run_id, str) or not _RUN_ID.fullmatch(self.run_id):
            raise InvalidImportRequest(
                "run_id: must be YYYY-MM-DD[-manual-xxxxxxxx | -arrival-xxxxxxxx]"
            )
        if not self.run_id.startswith(self.run_date):
            raise InvalidImportRequest("run_id: must start with run_date")
        if self.trigger not in TRIGGERS:
            raise InvalidImportRequest(f"trigger: must be one of {', '.join(TRIGGERS)}")

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

    @classmethod
    def parse(cls, body: bytes | str) -> ImportRequest:
        try:
            data = parse_object(body, max_bytes=MAX_BODY_BYTES)
        except InvalidBody as error:
            raise InvalidImportRequest(error.describe()) from None
        unknown = set(data) - {"account", "run_date", "run_id", "trigger"}
        if unknown:
            raise InvalidImportRequest(f"unknown field(s): {', '.join(sorted(unknown))[:200]}")
        for name in ("account", "run_date", "run_id"):
            if name not in data:
                raise InvalidImportRequest(f"{name}: missing")
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))
