"""Rejected records of one file: JSON lines in a block blob, committed when the file is done.

    {"source": "a.csv", "location": "line 12", "line": 12, "member_id": "M1",
     "reason": "...", "record": "<the original text>"}  # or "record_base64" (not UTF-8)
    {"source": "b.834", "location": "segment 40", "segment": 40, "line": 40, ...}

`line` is the physical line the record starts on (an 834 written on one line: 1);
`segment` the 834 segment number of its INS, as X12 acknowledgments count them.

Lines are staged as the file streams (`staged_blob.StagedBlob`: about 1 MiB a block, and
at every checkpoint), so a file with many rejections still uses little memory; they become
visible only on `commit()`, when the file is done. A resumed import carries on from the
checkpoint's block count and count.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from shared.imports.records import SourceRecord
from shared.imports.staged_blob import StagedBlob
from shared.imports.text_stream import has_undecodable, original_bytes


def reject_line(source: str, record: SourceRecord, reason: str) -> bytes:
    entry: dict[str, Any] = {
        "source": source,
        "location": record.location,
        **({"segment": record.number} if record.unit == "segment" else {}),
        "line": record.line or (record.number if record.unit == "line" else None),
        "member_id": record.member_id,
        "reason": reason,
    }
    if has_undecodable(record.raw):
        entry["record_base64"] = base64.b64encode(original_bytes(record.raw)).decode("ascii")
    else:
        entry["record"] = record.raw
    return (json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8")


class RejectWriter:
    """Collects one file's rejects into blob `blob` (a BlobClient)."""

    def __init__(self, blob: Any, source: str, *, blocks: int = 0, count: int = 0) -> None:
        """`blocks`, `count`: what a checkpoint says was staged already."""
        self._staged = StagedBlob(blob, blocks=blocks)
        self._source = source
        self.count = count

    @property
    def blocks(self) -> int:
        return self._staged.blocks

    def add(self, record: SourceRecord, reason: str) -> None:
        self._staged.add(reject_line(self._source, record, reason))
        self.count += 1

    def stage(self) -> dict[str, int]:
        """Stage what is buffered (before a checkpoint); returns what the checkpoint keeps."""
        return {"blocks": self._staged.stage(), "count": self.count}

    def commit(self) -> bool:
        """Make the rejects visible; False (and no blob) when there were none."""
        if not self.count:
            return False
        self._staged.commit("application/x-ndjson")
        return True
