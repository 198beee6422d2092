"""The last hour as small charts: each instance tallies the library's events per 5 minutes.

A handler on the `blobsingleton.events` logger counts each event kind per 5-minute bucket and
writes its tally (`tally/{inverted bucket}/{instance}.json` in OPS_NOTES_CONTAINER: one small
blob per instance and bucket, overwritten at most once a minute while events come, on a thread
of its own, so the invocation that logs never waits for it); the status
page's charts read them back (`series`: one listing, one read per instance and bucket of the
hour). What it counts is what the logger passes: the library's events at INFO and above
(the worker's default). A process that ends loses its last minute's counts.

    invocations   run-once calls answered: `completed` and `replay`
    locks taken   `acquire`
    waits         calls that found their key busy: `busy_skip` and `defer`
    failures      `lost`, `renewal_failed`, `takeover` (a crashed run taken over), and
                  messages moved to a poison queue (`shared.poison`)
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from typing import Any

from azure.core.exceptions import ResourceNotFoundError
from blobsingleton.leases import instance_id

from shared.ops_notes import ensure, iso, notes_container

log = logging.getLogger(__name__)

BUCKET_S = 300
WINDOW_S = 3600
FLUSH_S = 60.0
_INVERT = 10**11
SERIES = {
    "invocations": ("completed", "replay"),
    "locks taken": ("acquire",),
    "waits": ("busy_skip", "defer"),
    "failures": ("lost", "renewal_failed", "takeover", "poison"),
}


def _name(bucket: int, instance: str) -> str:
    return f"tally/{_INVERT - bucket:011d}/{instance}.json"


class EventTally(logging.Handler):
    """Counts events per bucket in memory; writes the buckets that changed once a minute."""

    def __init__(self, instance: str | None = None) -> None:
        super().__init__(logging.DEBUG)
        self._instance = instance
        self._counts: dict[int, Counter[str]] = {}
        self._dirty: set[int] = set()
        self._flushed = 0.0
        self._writing = False
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        kind = getattr(record, "event", None)
        if isinstance(kind, str):
            self.count(kind)

    def count(self, kind: str, now: float | None = None) -> None:
        now = time.time() if now is None else now
        bucket = int(now // BUCKET_S * BUCKET_S)
        with self._guard:
            self._counts.setdefault(bucket, Counter())[kind] += 1
            self._dirty.add(bucket)
            for old in [b for b in self._counts if b < bucket - WINDOW_S]:
                del self._counts[old]
            due = now - self._flushed >= FLUSH_S and not self._writing
            if due:
                self._writing = True
                self._flushed = now
        if due:  # off the thread that logged: an invocation never waits for the write
            threading.Thread(target=self._write_then_done, name="ops-tally", daemon=True).start()

    def _write_then_done(self) -> None:
        try:
            self.write()
        finally:
            self._writing = False

    def write(self) -> None:
        """Write the changed buckets now (a failure is logged; they are written next time)."""
        with self._guard:
            dirty = {b: dict(self._counts.get(b, {})) for b in self._dirty}
            self._dirty.clear()
        for bucket, counts in dirty.items():
            try:
                container = notes_container()
                ensure(container)
                name = _name(bucket, self._instance or instance_id())
                container.upload_blob(name, json.dumps(counts), overwrite=True)
            except Exception:
                log.warning("could not write the event tally", exc_info=True)
                with self._guard:
                    self._dirty.add(bucket)


_tally = EventTally()


def install() -> EventTally:
    """Count this process's events (idempotent); the handler, to `count` the app's own."""
    events = logging.getLogger("blobsingleton.events")
    if _tally not in events.handlers:
        events.addHandler(_tally)
    return _tally


def series(now: float | None = None) -> dict[str, Any]:
    """Per series, the counts of the last hour's 12 buckets (oldest first), every instance's
    tallies summed."""
    now = time.time() if now is None else now
    last = int(now // BUCKET_S * BUCKET_S)
    buckets = [last - BUCKET_S * i for i in range(WINDOW_S // BUCKET_S - 1, -1, -1)]
    totals: dict[int, Counter[str]] = {b: Counter() for b in buckets}
    container = notes_container()
    try:
        for blob in container.list_blobs(name_starts_with="tally/"):
            bucket = _INVERT - int(str(blob.name).split("/")[1])
            if bucket < buckets[0]:
                break  # newest first: the rest is older than the hour
            if bucket in totals:
                totals[bucket].update(json.loads(container.download_blob(blob.name).readall()))
    except ResourceNotFoundError:
        pass
    return {
        "bucket_s": BUCKET_S,
        "starts": [iso(b) for b in buckets],
        "series": [
            {
                "name": name,
                "kinds": list(kinds),
                "values": [sum(totals[b][k] for k in kinds) for b in buckets],
            }
            for name, kinds in SERIES.items()
        ],
    }
