"""Rejected records of one file: JSON lines in a block blob, committed when the file is done.

    {"source": "a.csv", "location": "line 12", "line": 12, "member_id": "M1",
     "reason": "...", "record": "<the original text>"}  # or "record_base64" (not UTF-8)
    {"source": "b.834", "location": "segment 40", "segment": 40, "line": 40, ...}

`line` is the physical line the record starts on (an 834 written on one line: 1);
`segment` the 834 segment number of its INS, as X12 acknowledgments count them.

Blocks are staged as the file streams (about 1 MiB each), so a file with many rejections
still uses little memory; they become visible only on `commit()`. A crash before the commit
leaves nothing half-written: the next attempt stages and commits the file's rejects anew.
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

    def __init__(self, blob: Any, source: str) -> None:
        self._blob = blob
        self._source = source
        self._buffer = bytearray()
        self._blocks: list[BlobBlock] = []
        self.count = 0

    def add(self, record: SourceRecord, reason: str) -> None:
        self._buffer += reject_line(self._source, record, reason)
        self.count += 1
        if len(self._buffer) >= BLOCK_BYTES:
            self._stage()

    def _stage(self) -> None:
        block_id = base64.b64encode(f"{len(self._blocks):08d}".encode()).decode()
        self._blob.stage_block(block_id, bytes(self._buffer))
        self._blocks.append(BlobBlock(block_id=block_id))
        self._buffer.clear()

    def commit(self) -> bool:
        """Make the rejects visible; False (and no blob) when there were none."""
        if not self.count:
            return False
        if self._buffer:
            self._stage()
        self._blob.commit_block_list(
            self._blocks,
            content_settings=ContentSettings(content_type="application/x-ndjson"),
        )
        return True
