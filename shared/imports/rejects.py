"""Rejected records of one file: JSON lines in a block blob, committed when the file is done.

    {"source": "a.csv", "location": "line 12", "line": 12, "member_id": "M1",
     "reason": "...", "record": "<the original text>"}  # or "record_base64" (not UTF-8)
    {"source": "b.834", "location": "segment 40", "segment": 40, "line": 40, ...}

`line` is the physical line the record starts on (an 834 written on one line: 1);
`segment` the 834 segment number of its INS, as X12 acknowledgments count them.

Lines are staged as the file streams (`staged_blob.StagedBlob`: about 1 MiB a block, and
at every checkpoint), so a file with many rejections still uses little memory; they become
visible only on `commit()`, when the file is done. A resumed import carries on from the
checkpoint's block count, count and bytes.

Bounded: at most `max_count` records and `max_bytes` bytes (IMPORT_MAX_REJECTS,
IMPORT_MAX_REJECT_BYTES), and never more blocks than one blob may have. `add` refuses the
record that would pass a cap (nothing of it written) and returns False: the importer stops
the file there (`importer._stop_file`), so junk input costs at most the caps, whatever its
size. Blocks: about one per MiB (BLOCK_BYTES) plus at most one per checkpoint that had
rejects; `MAX_BLOCKS` keeps the rejected file one blob whatever the settings.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from shared.imports.records import SourceRecord
from shared.imports.staged_blob import MAX_BLOCKS, StagedBlob
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
    """Collects one file's rejects into blob `blob` (a BlobClient), within its caps."""

    def __init__(
        self,
        blob: Any,
        source: str,
        *,
        blocks: int = 0,
        count: int = 0,
        size: int = 0,
        max_count: int,
        max_bytes: int,
    ) -> None:
        """`blocks`, `count`, `size`: what a checkpoint says was staged already (its
        "blocks", "count" and "bytes"); `max_count`, `max_bytes`: the caps."""
        self._staged = StagedBlob(blob, blocks=blocks)
        self._source = source
        self.count = count
        self.bytes = size
        self.max_count = max_count
        self.max_bytes = max_bytes
        #: The cap the refused record would have passed (`full`), once `add` refused one.
        self.passed: str | None = None

    @property
    def blocks(self) -> int:
        return self._staged.blocks

    def add(self, record: SourceRecord, reason: str) -> bool:
        """Write `record`'s reject; False (nothing written) when it would pass a cap."""
        line = reject_line(self._source, record, reason)
        self.passed = self.full(len(line))
        if self.passed is not None:
            return False
        self._staged.add(line)
        self.count += 1
        self.bytes += len(line)
        return True

    def full(self, size: int = 1) -> str | None:
        """Which cap a next reject of `size` bytes would pass (a sentence), or None."""
        if self.count + 1 > self.max_count:
            return f"more than IMPORT_MAX_REJECTS={self.max_count} rejected records"
        if self.bytes + size > self.max_bytes:
            return (f"rejected records over IMPORT_MAX_REJECT_BYTES={self.max_bytes} bytes "
                    f"({self.count} written, {self.bytes} bytes)")  # fmt: skip
        # one block this add may stage, one the next checkpoint or the commit may
        if self._staged.blocks + 2 > MAX_BLOCKS:
            return f"rejected records at {self._staged.blocks} blocks, the most one blob may have"
        return None

    def stage(self) -> dict[str, int]:
        """Stage what is buffered (before a checkpoint); returns what the checkpoint keeps."""
        return {"blocks": self._staged.stage(), "count": self.count, "bytes": self.bytes}

    @classmethod
    def from_checkpoint(
        cls, blob: Any, source: str, saved: dict[str, Any] | None, *, max_count: int,
        max_bytes: int,
    ) -> RejectWriter:  # fmt: skip
        """The writer as checkpoint entry `saved` (what `stage()` returned; None: new) left it."""
        saved = saved or {}
        return cls(blob, source, blocks=int(saved.get("blocks", 0)),
                   count=int(saved.get("count", 0)), size=int(saved.get("bytes", 0)),
                   max_count=max_count, max_bytes=max_bytes)  # fmt: skip

    def commit(self) -> bool:
        """Make the rejects visible; False (and no blob) when there were none."""
        if not self.count:
            return False
        self._staged.commit("application/x-ndjson")
        return True
