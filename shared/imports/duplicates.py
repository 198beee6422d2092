"""Which member rows a writer has already written, in a fixed 1 MiB whatever the run's size.

The member writer uses it when an account had no members when the run began: a member the
filter has certainly not seen cannot have a row yet, so its row need not be read.

An exact set of ids would be the one part of an import whose memory grows with the file
(~90 bytes per id as Python strings). Instead a Bloom filter answers "certainly not seen"
for almost every id; only on a "maybe" does the writer read the Members row itself, so the
answer stays exact. With 1 MiB and 5 hashes a "maybe" for a new id happens about
once per 1.5 million ids at 100,000 ids, and for 2% of ids at 1,000,000.
"""

from __future__ import annotations

import hashlib

BITS = 8 * 1024 * 1024
HASHES = 5


class IdFilter:
    """A Bloom filter over member ids: no false negatives, rare false positives."""

    def __init__(self, bits: int = BITS, hashes: int = HASHES) -> None:
        self._bits = bytearray(bits // 8)
        self._size = bits
        self._hashes = hashes
        self.count = 0

    def _positions(self, member_id: str) -> list[int]:
        digest = hashlib.blake2b(member_id.encode("utf-8"), digest_size=16).digest()
        first = int.from_bytes(digest[:8], "little")
        step = int.from_bytes(digest[8:], "little") | 1
        return [(first + i * step) % self._size for i in range(self._hashes)]

    def might_contain(self, member_id: str) -> bool:
        return all(self._bits[p >> 3] & (1 << (p & 7)) for p in self._positions(member_id))

    def add(self, member_id: str) -> None:
        for p in self._positions(member_id):
            self._bits[p >> 3] |= 1 << (p & 7)
        self.count += 1
