"""What is stored about a job: its record, its outcome (completion) and its announcement."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any


class JobStatus(StrEnum):
    ACCEPTING = "accepting"  # record written, unit messages being enqueued
    RUNNING = "running"  # every unit message enqueued
    SUCCEEDED = "succeeded"  # finished, every unit done
    FAILED = "failed"  # finished, some units failed (listed)


class UnitState(StrEnum):
    DONE = "done"
    FAILED = "failed"


class AnnouncementState(StrEnum):
    DELIVERED = "delivered"  # the receiver answered 2xx
    REFUSED = "refused"  # the receiver answered 4xx (or a redirect): not retried
    ABANDONED = "abandoned"  # unavailable for longer than JOB_CALLBACK_GIVE_UP_HOURS


def _dumps(data: dict[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True)
class JobRecord:
    """`jobs/{job}/job.json`: what the job is, written once when it is accepted."""

    job_id: str
    total: int
    unit_ids: list[str]
    callback_url: str
    created_at: float
    fingerprint: str
    status: JobStatus = JobStatus.ACCEPTING
    etag: str | None = field(default=None, compare=False)

    def with_(self, **changes: Any) -> JobRecord:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("etag")
        return data

    def to_json(self) -> bytes:
        return _dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any], etag: str | None = None) -> JobRecord:
        return cls(
            job_id=str(data["job_id"]),
            total=int(data["total"]),
            unit_ids=[str(u) for u in data["unit_ids"]],
            callback_url=str(data["callback_url"]),
            created_at=float(data["created_at"]),
            fingerprint=str(data["fingerprint"]),
            status=JobStatus(data.get("status", JobStatus.ACCEPTING)),
            etag=etag,
        )

    @classmethod
    def from_json(cls, raw: bytes, etag: str | None = None) -> JobRecord:
        return cls.from_dict(json.loads(raw), etag)


@dataclass(frozen=True)
class Announcement:
    """How the callback went; stored as the @once result and in the completion."""

    state: AnnouncementState
    attempts: int
    at: float
    http_status: int | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Announcement:
        return cls(
            state=AnnouncementState(data["state"]),
            attempts=int(data["attempts"]),
            at=float(data["at"]),
            http_status=data.get("http_status"),
            reason=data.get("reason"),
        )


@dataclass(frozen=True)
class FailedTries:
    """Callback attempts that failed for now (5xx, 408, 429, no answer), kept in the outcome
    until one is delivered, refused or abandoned, so operators see them (issue 51): how many,
    when the last ended, its category and HTTP status (never what the receiver said)."""

    tries: int
    last_at: float
    reason: str
    http_status: int | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FailedTries:
        status = data.get("http_status")
        return cls(int(data["tries"]), float(data["last_at"]), str(data["reason"]),
                   None if status is None else int(status))  # fmt: skip


@dataclass(frozen=True)
class Completion:
    """`jobs/{job}/completion.json`: the outcome, created once (If-None-Match) by the
    finalizer; it also carries the callback URL so announcing needs no other read."""

    job_id: str
    status: JobStatus
    units_done: int
    units_failed: int
    failed_units: list[str]
    callback_url: str
    completed_at: float
    last_unit_at: float
    finalized_by: str
    announcement: Announcement | None = None
    failed_tries: FailedTries | None = None
    etag: str | None = field(default=None, compare=False)

    @property
    def announced(self) -> bool:
        return self.announcement is not None

    def callback_body(self) -> dict[str, Any]:
        """The JSON body the callback receiver gets."""
        return {
            "job_id": self.job_id,
            "status": str(self.status),
            "units_done": self.units_done,
            "units_failed": self.units_failed,
            "failed_units": list(self.failed_units),
        }

    def with_(self, **changes: Any) -> Completion:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("etag")
        data["announcement"] = self.announcement.to_dict() if self.announcement else None
        if self.failed_tries is None:
            data.pop("failed_tries")
        return data

    def to_json(self) -> bytes:
        return _dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any], etag: str | None = None) -> Completion:
        announcement = data.get("announcement")
        return cls(
            job_id=str(data["job_id"]),
            status=JobStatus(data["status"]),
            units_done=int(data["units_done"]),
            units_failed=int(data["units_failed"]),
            failed_units=[str(u) for u in data["failed_units"]],
            callback_url=str(data["callback_url"]),
            completed_at=float(data["completed_at"]),
            last_unit_at=float(data["last_unit_at"]),
            finalized_by=str(data["finalized_by"]),
            announcement=Announcement.from_dict(announcement) if announcement else None,
            failed_tries=FailedTries.from_dict(tries)
            if (tries := data.get("failed_tries"))
            else None,
            etag=etag,
        )

    @classmethod
    def from_json(cls, raw: bytes, etag: str | None = None) -> Completion:
        return cls.from_dict(json.loads(raw), etag)


@dataclass(frozen=True)
class UnitSpec:
    """One unit of a job as submitted: its id and its payload (any JSON)."""

    id: str
    payload: Any = None


@dataclass(frozen=True)
class Marker:
    """A finished unit as listed: its id, state and when it finished (epoch seconds)."""

    unit_id: str
    state: UnitState
    at: float
