"""The checkpoint of one import run: where in which file the next invocation carries on.

One small JSON blob per run, `{account}/reports/{run_id}/checkpoint.json`, rewritten after
every chunk of records whose rows are committed:

    {"token": 7, "file": "members.csv", "etag": "...", "phase": "members",
     "resume": {"offset": 7340032, "line": 50001},     # the reader's own resume point
     "next_record": 50002,                              # first record not yet done
     "report": {...the file's counts so far...},
     "rejects": {"blocks": 3, "count": 12, "bytes": 1830},   # `rejects.RejectWriter.stage`
     "audit": {...}, "facts": {...}, "problems": [...], "chunks": 10, "invocations": 2}

`resume` is what the reader needs to start at `offset` (a range read) without reading
what came before: for a CSV the line count, for an 834 the transaction set's header to
replay and pyx12's counters (`x12.stream`). `phase` is "envelope" (an 834's first pass),
"members", "sweep" (read to its end), or "stopped" (its rejects reached their cap, the reason
in "stopped": what is left is to commit and move, `importer._stop_file`). A file finished
(moved out of incoming/) drops the checkpoint's file part.

Fenced like the member rows: every write has `If-Match` on the ETag this holder last saw
(or `If-None-Match: *` for the first), and a holder starts by writing its token into it,
refusing one written by a higher token. A newer holder's first write changes the ETag,
so a stale holder can never move the checkpoint again (`StaleHolder`). A save whose answer
was lost, sent again by the SDK, meets its own ETag: it is known as ours (`known_writes`), not
taken for a newer holder.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import ResourceNotFoundError
from azure.storage.blob import ContentSettings

from shared.imports.member_table import StaleHolder
from shared.known_writes import upload_if

log = logging.getLogger("shared.imports")


class CheckpointStore:
    """The checkpoint blob of one run, written only by the holder of `token`."""

    def __init__(self, container: Any, blob_name: str, account: str, token: int) -> None:
        self._blob = container.get_blob_client(blob_name)
        self.account = account
        self.token = token
        self._etag: str | None = None
        self.data: dict[str, Any] = {}

    def claim(self) -> dict[str, Any]:
        """Read the checkpoint and write our token into it; returns what it held ({} if
        there was none). Raises `StaleHolder` if a higher token wrote it."""
        for _ in range(5):
            data, etag = self._read()
            written = int(data.get("token", 0) or 0)
            if written > self.token:
                raise StaleHolder(self.account, self.token, written)
            self._etag = etag
            self.data = {"invocations": int(data.get("invocations", 0)) + 1}
            try:
                self.save(data)
            except StaleHolder:
                continue  # an older holder moved it between our read and write: decide again
            return data
        raise StaleHolder(self.account, self.token, None)

    def save(self, data: dict[str, Any]) -> None:
        """Replace the checkpoint (If-Match on our last ETag); `StaleHolder` if it moved."""
        data = {**data, "invocations": self.data.get("invocations", 0)}  # this one's count
        body = json.dumps({**data, "token": self.token, "saved_at": time.time()},
                          separators=(",", ":")).encode()  # fmt: skip
        condition: dict[str, Any]
        if self._etag is None:
            condition = {"match_condition": MatchConditions.IfMissing}
        else:
            condition = {"etag": self._etag, "match_condition": MatchConditions.IfNotModified}
        json_type = ContentSettings("application/json")
        etag = upload_if(self._blob, body, overwrite=True, content_settings=json_type, **condition)
        if etag is None:
            raise StaleHolder(self.account, self.token, None)
        self._etag = etag
        self.data = {**data, "token": self.token}

    def _read(self) -> tuple[dict[str, Any], str | None]:
        try:
            download = self._blob.download_blob()
            return json.loads(download.readall()), download.properties.etag
        except ResourceNotFoundError:
            return {}, None
