"""A block blob written as a stream: blocks staged as it grows, visible only once committed.

Blocks are staged about every BLOCK_BYTES and whenever `stage()` is called (before a
checkpoint), with ids numbered from 0. Staged blocks outlive the invocation (Azure keeps
uncommitted blocks for a week), so a resumed import carries on from the checkpoint's block
count, re-staging (same ids) what an attempt that did not reach the next checkpoint staged
after it; blocks staged but not in the committed list are dropped by the commit. A crash
before the commit leaves nothing half-written. Memory: at most one block.
"""

from __future__ import annotations

import base64
from typing import Any

from azure.storage.blob import BlobBlock, ContentSettings

BLOCK_BYTES = 1024 * 1024
#: Committed blocks one blob may have (Azure's limit); a writer that stages at every
#: checkpoint must stop before it (`rejects.RejectWriter.full`).
MAX_BLOCKS = 50_000


class StagedBlob:
    """Bytes appended to blob `blob` (a BlobClient), from block `blocks` on."""

    def __init__(self, blob: Any, *, blocks: int = 0) -> None:
        self.blob = blob
        self.blocks = blocks
        self._buffer = bytearray()

    def add(self, data: bytes) -> None:
        self._buffer += data
        if len(self._buffer) >= BLOCK_BYTES:
            self._stage()

    def _stage(self) -> None:
        self.blob.stage_block(_block_id(self.blocks), bytes(self._buffer))
        self.blocks += 1
        self._buffer.clear()

    def stage(self) -> int:
        """Stage what is buffered; returns the block count a checkpoint keeps."""
        if self._buffer:
            self._stage()
        return self.blocks

    def commit(self, content_type: str) -> None:
        """Make every block staged so far the blob's content."""
        self.stage()
        self.blob.commit_block_list(
            [BlobBlock(block_id=_block_id(i)) for i in range(self.blocks)],
            content_settings=ContentSettings(content_type=content_type),
        )


def _block_id(number: int) -> str:
    return base64.b64encode(f"{number:08d}".encode()).decode()
