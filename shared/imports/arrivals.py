"""A file's arrival: which account's file a blob event names, and which version it is.

The blob trigger (`functions/imports.py`, `import_arrival`) is told about every blob created
in the imports container (its Event Grid subscription cannot filter on a path segment in the
middle); only `{account}/incoming/{file}` is an arrival. The account and the file name are
checked with the rules the nightly run applies (`accounts.validate_account`,
`layout.check_file_name`): a blob the run would skip or refuse starts nothing.

A version is the blob's name and its ETag now. The ETag is read from storage: the host's
`Properties` carry it as `{}` (see devhost/blob_listener.py), and for the Event Grid source the
host hands the function the blob as it is when the event is processed, not the version the
event named. `version_of` is a digest of both, a fixed-length key part that names no file.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from azure.core.exceptions import ResourceNotFoundError

from shared.imports.accounts import InvalidAccount, validate_account
from shared.imports.layout import InvalidFileName, Layout, check_file_name, imports_container

INCOMING = "incoming"


class NotAnArrival(ValueError):
    """A blob event that starts no import; `reason` says why without naming the blob."""

    def __init__(self, reason: str, *, refused: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        #: An incoming file the nightly run would refuse too (its report lists it).
        self.refused = refused


@dataclass(frozen=True)
class Arrival:
    """An incoming file of an account: its blob name in the imports container."""

    account: str
    file_name: str  # relative to incoming/

    @property
    def blob_name(self) -> str:
        return Layout(self.account, "").incoming + self.file_name


def arrival_of(trigger_path: str, container: str) -> Arrival:
    """The arrival a blob trigger's `BlobTrigger` ("container/blob name") is; `NotAnArrival`
    for a blob outside `{account}/incoming/`, an invalid account or a refused file name."""
    blob_name = trigger_path.removeprefix(f"{container}/")
    if blob_name == trigger_path:
        raise NotAnArrival("not in the imports container")
    account, _, rest = blob_name.partition("/")
    folder, _, file_name = rest.partition("/")
    if folder != INCOMING or not file_name:
        raise NotAnArrival("not an incoming file")
    try:
        validate_account(account)
    except InvalidAccount as error:
        raise NotAnArrival(f"account folder skipped: {error.reason}") from None
    try:
        check_file_name(file_name)
    except InvalidFileName as error:
        raise NotAnArrival(str(error), refused=True) from None
    return Arrival(account, file_name)


def current_etag(arrival: Arrival, connection: str = "AzureWebJobsStorage") -> str | None:
    """The file's ETag now, or None when it has left incoming/ (imported, or deleted)."""
    blob = imports_container(connection).get_blob_client(arrival.blob_name)
    try:
        return str(blob.get_blob_properties().etag)
    except ResourceNotFoundError:
        return None


def version_of(arrival: Arrival, etag: str) -> str:
    """32 hex digits naming one version of one file (its blob name and ETag)."""
    text = f"{arrival.blob_name}\n{etag}".encode()
    return hashlib.blake2b(text, digest_size=16).hexdigest()
