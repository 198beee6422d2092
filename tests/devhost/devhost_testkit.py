"""Helpers for the devhost tests (a uniquely named module: tests/devhost has no __init__.py)."""

from __future__ import annotations

import base64
import json
import logging
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from azure.storage.queue import BinaryBase64DecodePolicy, BinaryBase64EncodePolicy
from blobsingleton import StorageAccount

from devhost.invocation import InvocationIdFilter

HERE = Path(__file__).resolve().parent
SAMPLE_APP = "devhost_sample_app"
FUNCTION_KEY = "test-function-key"


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.1) -> Any:
    """Poll until `predicate()` is truthy; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")


class Records:
    """The JSON lines the sample app appends, one per event."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def all(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line]

    def where(self, **match: Any) -> list[dict[str, Any]]:
        return [r for r in self.all() if all(r.get(k) == v for k, v in match.items())]


class StorageHelper:
    """Test-side storage access, independent of the host under test."""

    def __init__(self, connection_string: str) -> None:
        self.account = StorageAccount(connection_string=connection_string)
        self.queues = self.account.queue_service()
        self.blobs = self.account.blob_service()

    def queue(self, name: str, *, base64_encoded: bool = True) -> Any:
        if base64_encoded:
            return self.queues.get_queue_client(
                name,
                message_encode_policy=BinaryBase64EncodePolicy(),
                message_decode_policy=BinaryBase64DecodePolicy(),
            )
        return self.queues.get_queue_client(name)  # raw text, as someone might put it

    def close(self) -> None:
        self.queues.close()
        self.blobs.close()

    def depth(self, name: str) -> int:
        """Messages in the queue, invisible ones included (0 when the queue does not exist)."""
        client = self.queue(name)
        try:
            return int(client.get_queue_properties().approximate_message_count or 0)
        except Exception:
            return 0

    def peek_bodies(self, name: str) -> list[bytes]:
        raw = self.queue(name, base64_encoded=False)
        return [base64.b64decode(m.content) for m in raw.peek_messages(max_messages=32)]


_ID = re.compile(r"\binvocation_id=(\S+)")


class Shipped(logging.Handler):
    """Records as devhost ships them: with the id `InvocationIdFilter` ties them to."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.addFilter(InvocationIdFilter())
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def events(self, kind: str) -> list[tuple[str | None, str]]:
        """(the id in the message, the id shipped with it) of each `kind` record."""
        found = []
        for record in self.records:
            message = record.getMessage()
            if message.startswith(f"event={kind} "):
                match = _ID.search(message)
                found.append((match.group(1) if match else None, record.invocation_id))  # type: ignore[attr-defined]
        return found

    def ids_of(self, message: str) -> list[str]:
        """The id shipped with each record whose message is `message`."""
        return [r.invocation_id for r in self.records if r.getMessage() == message]  # type: ignore[attr-defined]
