"""Rejected records of one file: JSON lines in a block blob, committed when the file is done.

    {"source": "a.csv", "location": "line 12", "line": 12, "member_id": "M1",
     "reason": "...", "record": "<the original text>"}  # or "record_base64" (not UTF-8)
    {"source": "b.834", "location": "segment 40", "segment": 40, "line": 40, ...}

`line` is the physical line the record starts on (an 834 written on one line: 1);
`segment` the 834 segment number of its INS, as X12 acknowledgments count them.

Blocks are staged as the file streams (about 1 MiB each, and at every checkpoint), so a
file with many rejections still uses little memory; they become visible only on `commit()`.
Staged blocks outlive the invocation (Azure keeps uncommitted blocks for a week): a resumed
import carries on from the checkpoint's block count and count, re-staging (same block ids)
what an attempt that did not reach the next checkpoint staged after it. A crash before the
commit leaves nothing half-written.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from azure.storage.blob import BlobBlock, ContentSettings

from shared.imports.records import SourceRecord
from shared.imports.text_stream import has_undecodable, original_bytes

BLOCK_BYTES = 1024 * 1024


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
        self._blob = blob
        self._source = source
        self._buffer = bytearray()
        self.blocks = blocks
        self.count = count

    def add(self, record: SourceRecord, reason: str) -> None:
        self._buffer += reject_line(self._source, record, reason)
        self.count += 1
        if len(self._buffer) >= BLOCK_BYTES:
            self._stage()

    def _stage(self) -> None:
        self._blob.stage_block(_block_id(self.blocks), bytes(self._buffer))
        self.blocks += 1
        self._buffer.clear()

    def stage(self) -> dict[str, int]:
        """Stage what is buffered (before a checkpoint); returns what the checkpoint keeps."""
        if self._buffer:
            self._stage()
        return {"blocks": self.blocks, "count": self.count}

    def commit(self) -> bool:
        """Make the rejects visible; False (and no blob) when there were none."""
        if not self.count:
            return False
        if self._buffer:
            self._stage()
        self._blob.commit_block_list(
            [BlobBlock(block_id=_block_id(i)) for i in range(self.blocks)],
            content_settings=ContentSettings(content_type="application/x-ndjson"),
        )
        return True


def _block_id(number: int) -> str:
    return base64.b64encode(f"{number:08d}".encode()).decode()
