"""Run-once records: what is stored per key, and the small store interface behind it."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"


@dataclass(frozen=True)
class Record:
    """One key's state. Times are UTC epoch seconds."""

    key: str
    status: Status
    expires_at: float
    started_at: float
    payload_hash: str | None = None
    result: Any = None
    owner: str = ""
    attempt: int = 1
    etag: str | None = None

    def expired(self, now: float) -> bool:
        return now >= self.expires_at

    def with_(self, **changes: Any) -> Record:
        return replace(self, **changes)

    def to_json(self) -> bytes:
        data = asdict(self)
        data.pop("etag")
        return json.dumps(data, separators=(",", ":"), default=str).encode()

    @classmethod
    def from_json(cls, raw: bytes, etag: str | None) -> Record:
        data = json.loads(raw)
        data["status"] = Status(data["status"])
        return cls(**data, etag=etag)


class RecordStore(ABC):
    """Persistence of run-once records: four operations, each one storage request."""

    @abstractmethod
    def get(self, key: str) -> Record | None:
        """The record of `key` with its etag, or None."""

    @abstractmethod
    def put_if_absent(self, record: Record) -> Record:
        """Create the record; `RecordConflict` if one exists. Returns it with its etag."""

    @abstractmethod
    def replace(self, record: Record, etag: str) -> Record:
        """Overwrite the record if it still has `etag`; `RecordConflict` otherwise."""

    @abstractmethod
    def delete(self, key: str, etag: str) -> None:
        """Delete the record if it still has `etag`; `RecordConflict` otherwise."""
