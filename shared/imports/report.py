"""The run report (one JSON blob per run) and the attempt log (one blob per attempt).

The report carries counts (records, adds, changes, terminations, reinstatements,
unchanged, rejects), durations, file-level errors, what an audit file did to the members
it left out, and for each file the first rejections with location, line, member id and
reason, and the X12 acknowledgments written for each 834 (`ack`: "999 A", "999 E",
"999 R", "997 A", "TA1 R 023"..., `acks`: their blob names). Reasons never quote values,
so the report holds no names or birth dates; the rejected files next to it hold the records
themselves.
An attempt log is written when an attempt starts and again when it ends: overlapping
attempts of one account would show up there (the scenario checks that there are none).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from blobsingleton.leases import instance_id

#: Rejections listed per file in the report (all of them are in the rejected file).
SAMPLE_REJECTIONS = 20


def _iso(epoch: float | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC).isoformat()


@dataclass
class FileReport:
    name: str
    kind: str
    #: processed | rejected (whole file) | stopped (at its reject cap, IMPORT_MAX_REJECTS /
    #: IMPORT_MAX_REJECT_BYTES: what came before stays imported; moved to rejected/) |
    #: changed (left in incoming) | refused (its name cannot be used: left in incoming, unread)
    status: str = "pending"
    token: int | None = None  # of the attempt that handled it
    bytes: int = 0
    records: int = 0
    imported: int = 0  # records accepted: the five counts below (audit terminations not)
    rejected: int = 0
    added: int = 0
    changed: int = 0
    terminated: int = 0  # includes members an audit file left out
    reinstated: int = 0
    unchanged: int = 0  # accepted, but the member already was what the record says
    duration_s: float = 0.0
    error: str | None = None
    audit: str | None = None  # what an audit (030) file did to the members it left out
    ack: str | None = None  # the acknowledgments written ("999 E, TA1 A 000"; "none")
    acks: list[str] = field(default_factory=list)  # their blob names
    reasons: Counter[str] = field(default_factory=Counter)
    rejections: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FileReport:
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        known["reasons"] = Counter(known.get("reasons") or {})
        return cls(**known)

    def count(self, outcome: str, *, record: bool = True) -> None:
        """Count an accepted record by what it did (`maintenance.classify`); an audit
        file's termination of an absent member is counted with `record=False`."""
        name = _OUTCOMES[outcome]
        setattr(self, name, getattr(self, name) + 1)
        if record:
            self.imported += 1

    def reject(
        self, location: str, member_id: str | None, category: str, reason: str, line: int = 0
    ) -> None:
        self.rejected += 1
        self.reasons[category] += 1
        if len(self.rejections) < SAMPLE_REJECTIONS:
            entry: dict[str, Any] = {"location": location, "member_id": member_id}
            if line:
                entry["line"] = line
            self.rejections.append({**entry, "reason": reason})


#: `maintenance.classify` outcomes and the counter each goes to.
_OUTCOMES = {
    "add": "added",
    "change": "changed",
    "termination": "terminated",
    "reinstatement": "reinstated",
    "unchanged": "unchanged",
}
COUNTS = tuple(_OUTCOMES.values())


@dataclass
class RunReport:
    account: str
    run_id: str
    run_date: str
    trigger: str
    token: int
    instance: str = field(default_factory=instance_id)
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    status: str = "running"  # running | completed | stale | failed
    files: list[FileReport] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def records(self) -> int:
        return sum(f.records for f in self.files)

    @property
    def imported(self) -> int:
        return sum(f.imported for f in self.files)

    @property
    def rejected(self) -> int:
        return sum(f.rejected for f in self.files)

    def counted(self, name: str) -> int:
        return sum(int(getattr(f, name)) for f in self.files)

    @property
    def duration_s(self) -> float:
        return (self.finished_at or time.time()) - self.started_at

    def finish(self, status: str) -> None:
        self.status = status
        self.finished_at = time.time()

    def to_dict(self) -> dict[str, Any]:
        files = []
        for f in self.files:
            data = asdict(f)
            data["reasons"] = dict(f.reasons)
            files.append(data)
        duration = self.duration_s
        return {
            "account": self.account,
            "run_id": self.run_id,
            "run_date": self.run_date,
            "trigger": self.trigger,
            "token": self.token,
            "instance": self.instance,
            "status": self.status,
            "started_at": _iso(self.started_at),
            "finished_at": _iso(self.finished_at),
            "duration_s": round(duration, 3),
            "totals": {
                "files": len(self.files),
                "files_processed": sum(f.status == "processed" for f in self.files),
                "files_rejected": sum(f.status == "rejected" for f in self.files),
                "files_stopped": sum(f.status == "stopped" for f in self.files),
                "files_left_in_incoming": sum(f.status == "changed" for f in self.files),
                "files_refused": sum(f.status == "refused" for f in self.files),
                **self.ack_totals(),
                "records": self.records,
                "imported": self.imported,
                "rejected": self.rejected,
                **{name: self.counted(name) for name in COUNTS},
                "rows_per_s": round(self.records / duration, 1) if duration > 0 else None,
            },
            "errors": self.errors,
            "files": files,
        }

    def ack_totals(self) -> dict[str, int]:
        """Acknowledgments written: functional (999/997) by AK901, and TA1s."""
        codes = [f.ack.split(",")[0].split() for f in self.files if f.ack and f.ack != "none"]
        functional = [c[1] for c in codes if c[0] in ("999", "997") and len(c) > 1]
        return {
            "acks_written": sum(len(f.acks) for f in self.files),
            "acks_accepted": functional.count("A"),
            "acks_accepted_with_errors": functional.count("E") + functional.count("P"),
            "acks_rejected": functional.count("R"),
            "acks_ta1": sum("TA1" in (f.ack or "") for f in self.files),
        }

    def summary(self) -> dict[str, Any]:
        """What the run-once record stores and the function returns: counts only."""
        totals = self.to_dict()["totals"]
        return {"account": self.account, "run_id": self.run_id, "status": self.status, **totals}

    def attempt(self, outcome: str | None = None) -> dict[str, Any]:
        return {
            "account": self.account,
            "run_id": self.run_id,
            "token": self.token,
            "instance": self.instance,
            "started_at": self.started_at,
            "finished_at": self.finished_at if outcome else None,
            "outcome": outcome,
        }
