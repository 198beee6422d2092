"""Where an account's files live in the imports container (app setting IMPORTS_CONTAINER).

    {account}/incoming/{file}                              files waiting to be imported
    {account}/processed/{run_id}/{file}                    imported files, moved here
    {account}/rejected/{run_id}/{file}.rejected.jsonl      rejected records, one JSON per line
    {account}/rejected/{run_id}/{file}                     a file rejected as a whole, with
    {account}/rejected/{run_id}/{file}.error.json          ... the reason next to it
    {account}/reports/{run_id}/report.json                 the run report
    {account}/reports/{run_id}/attempts/{token}.json       one per attempt: start, end, outcome
    {account}/reports/{run_id}/checkpoint.json             where the run carries on (fenced)
    {account}/acks/{run_id}/{file}.999 (.997)              the 834's X12 acknowledgment
    {account}/acks/{run_id}/{file}.ta1                     ... and its TA1, when one is due

For the nightly run `run_id` is the run date (YYYY-MM-DD).

A file's name (its blob name after `incoming/`) goes into every name derived from it, so it
is checked where it enters, when the run lists `incoming/` (`check_file_name`): a name with
an empty, "." or ".." segment, a backslash, a control character, a segment ending in "."
(which Azure's URLs do not keep) or more than MAX_FILE_NAME characters is refused: the
file is not read, moved or acknowledged (its URL would not name it: an HTTP client resolves
"../" in a path, so the derived blob could land in another account's folder), and the run
report lists it as "refused" with the reason, every night until someone renames it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from azure.core.exceptions import ResourceExistsError

from shared import settings, storage

DEFAULT_CONTAINER = "imports"
#: Longest file name (sub-folders included) taken from `incoming/`: the longest derived
#: name (`rejected_records`) then stays inside Azure's 1,024-character blob name limit.
MAX_FILE_NAME = 512


class InvalidFileName(ValueError):
    """A file name that cannot be used; `reason` says why without echoing it."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"file name: {reason}")
        self.reason = reason


def check_file_name(name: str) -> str:
    """`name` (relative to `incoming/`) if it can go into derived blob names, else
    `InvalidFileName` (see the module docstring)."""
    if not name:
        raise InvalidFileName("is empty")
    if len(name) > MAX_FILE_NAME:
        raise InvalidFileName(f"is {len(name)} characters long, the limit is {MAX_FILE_NAME}")
    if any(not ch.isprintable() for ch in name):
        raise InvalidFileName("contains control characters")
    if "\\" in name:
        raise InvalidFileName("contains a backslash")
    for segment in name.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidFileName(
                f"has {'an empty' if not segment else repr(segment)} path segment"
            )
        if segment.endswith("."):
            raise InvalidFileName("has a path segment ending in '.'")
    return name


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

    def ack(self, file_name: str, kind: str) -> str:
        """The acknowledgment of `file_name`: `kind` 999, 997 or ta1."""
        return f"{self.account}/acks/{self.run_id}/{file_name}.{kind}"

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
