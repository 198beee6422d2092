"""What the import tests look at: the blobs, rows and messages an import left behind."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from shared import storage
from shared.imports import checkpoint as checkpoint_module
from shared.imports.layout import imports_container
from shared.imports.member_table import STATE_ROW, is_member_row, members_table


@dataclass(frozen=True)
class ImportsEnv:
    """Names this test's app uses, and small helpers to look at what an import did."""

    container: str
    table: str
    queue: str
    notifications_queue: str

    def upload(self, account: str, name: str, data: bytes) -> None:
        imports_container(create=True).upload_blob(f"{account}/incoming/{name}", data)

    def blob_names(self, prefix: str = "") -> list[str]:
        return sorted(b.name for b in imports_container().list_blobs(name_starts_with=prefix))

    def read(self, name: str) -> bytes:
        return bytes(imports_container().download_blob(name).readall())

    def read_json(self, name: str) -> Any:
        return json.loads(self.read(name))

    def rejected_lines(self, name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.read(name).decode().splitlines()]

    def members(self, account: str) -> dict[str, dict[str, Any]]:
        """Member rows of `account` by RowKey (the state and history rows left out)."""
        rows = members_table().query_entities(f"PartitionKey eq '{account}'")
        return {r["RowKey"]: dict(r) for r in rows if is_member_row(r["RowKey"])}

    def state(self, account: str) -> dict[str, Any]:
        return dict(members_table().get_entity(account, STATE_ROW))

    def messages(self, queue: str) -> list[dict[str, Any]]:
        client = storage.queue_client(queue)
        found = client.peek_messages(max_messages=32)
        return [json.loads(m.content) for m in found]


class Killed(BaseException):
    """Stands for the process dying (a BaseException: nothing on the way catches it)."""


def killed_before_sweep_checkpoint(monkeypatch: pytest.MonkeyPatch, run: Callable[[], Any]) -> None:
    """`run()` dies where the import would checkpoint its sweep: every chunk committed, the
    last one not checkpointed. The checkpoint store is as it was after."""
    store = checkpoint_module.CheckpointStore
    real_save = store.save

    def dying_save(self: checkpoint_module.CheckpointStore, state: dict[str, Any]) -> None:
        if state.get("phase") == "sweep":
            raise Killed
        real_save(self, state)

    monkeypatch.setattr(store, "save", dying_save)
    try:
        with pytest.raises(Killed):
            run()
    finally:
        monkeypatch.setattr(store, "save", real_save)
