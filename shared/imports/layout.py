"""Where an account's files live in the imports container (app setting IMPORTS_CONTAINER).

    {account}/incoming/{file}                              files waiting to be imported
    {account}/processed/{run_id}/{file}                    imported files, moved here
    {account}/rejected/{run_id}/{file}.rejected.jsonl      rejected records, one JSON per line
    {account}/rejected/{run_id}/{file}                     a file rejected as a whole, with
    {account}/rejected/{run_id}/{file}.error.json          ... the reason next to it
    {account}/reports/{run_id}/report.json                 the run report
    {account}/reports/{run_id}/attempts/{token}.json       one per attempt: start, end, outcome
    {account}/reports/{run_id}/checkpoint.json             where the run carries on (fenced)

For the nightly run `run_id` is the run date (YYYY-MM-DD).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from azure.core.exceptions import ResourceExistsError
from blobsingleton import settings

from shared import storage

DEFAULT_CONTAINER = "imports"


def container_name() -> str:
    return settings.setting("IMPORTS_CONTAINER", DEFAULT_CONTAINER) or DEFAULT_CONTAINER


def imports_container(connection: str = "AzureWebJobsStorage", *, create: bool = False) -> Any:
    """The imports container client; created when asked (writes need it to exist)."""
    container = storage.blob_service(connection).get_container_client(container_name())
    if create:
        with contextlib.suppress(ResourceExistsError):
            container.create_container()
    return container


@dataclass(frozen=True)
class Layout:
    """Blob names for one run of one account."""

    account: str
    run_id: str

    @property
    def incoming(self) -> str:
        return f"{self.account}/incoming/"

    def file_name(self, blob_name: str) -> str:
        """The name of an incoming blob relative to `incoming/` (sub-folders kept)."""
        return blob_name[len(self.incoming) :]

    def processed(self, file_name: str) -> str:
        return f"{self.account}/processed/{self.run_id}/{file_name}"

    def rejected_records(self, file_name: str) -> str:
        return f"{self.account}/rejected/{self.run_id}/{file_name}.rejected.jsonl"

    def rejected_file(self, file_name: str) -> str:
        return f"{self.account}/rejected/{self.run_id}/{file_name}"

    def rejected_reason(self, file_name: str) -> str:
        return f"{self.account}/rejected/{self.run_id}/{file_name}.error.json"

    @property
    def report(self) -> str:
        return f"{self.account}/reports/{self.run_id}/report.json"

    @property
    def checkpoint(self) -> str:
        return f"{self.account}/reports/{self.run_id}/checkpoint.json"

    def attempt(self, token: int) -> str:
        return f"{self.account}/reports/{self.run_id}/attempts/{token:012d}.json"

    @property
    def attempts(self) -> str:
        return f"{self.account}/reports/{self.run_id}/attempts/"
