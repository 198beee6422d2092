"""The email outbox: one JSON blob per send, for local runs and tests that count emails.

Layout: container EMAIL_OUTBOX_CONTAINER (default "outbox"), blob `{event id}/{uuid4}.json`
where the event id is percent-encoded (the lease library's key encoding) so any valid id is a safe
single path segment. The blob holds exactly the v3 mail body SendGrid would have received.
Every send writes a new blob, so a duplicate send shows up as a second blob under the same id.

A write whose answer was lost (a reset, or storage's 500 after the blob landed) is sent again
by the Storage SDK and meets its own first copy (409). `known_writes.upload_if` knows that copy
by its write id, so the send counts as done, once: it is not reported failed, which would free
the event's run-once key and send the email again under a new blob name.
"""

from __future__ import annotations

import contextlib
import json
import urllib.parse
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.storage.blob import ContentSettings
from blobsingleton.config import encode_key, validate_key

from shared import settings, storage
from shared.known_writes import upload_if

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient

DEFAULT_CONTAINER = "outbox"


@dataclass(frozen=True)
class OutboxEmail:
    """One email found in the outbox."""

    event_id: str
    blob_name: str
    mail: dict[str, Any]
    created: datetime | None = None


def outbox_container(container: str | None = None) -> str:
    """`container`, else app setting EMAIL_OUTBOX_CONTAINER, else "outbox"."""
    return container or settings.setting("EMAIL_OUTBOX_CONTAINER") or DEFAULT_CONTAINER


def outbox_client(
    container: str | None = None, connection: str = "AzureWebJobsStorage"
) -> ContainerClient:
    """The outbox container's client on the account `connection` names."""
    return storage.blob_service(connection).get_container_client(outbox_container(container))


def outbox_blob_name(event_id: str) -> str:
    """A new, unique blob name for one email of `event_id`."""
    return f"{encode_key(validate_key(event_id))}/{uuid.uuid4()}.json"


def write_outbox(
    event_id: str,
    mail: dict[str, Any],
    *,
    container: str | None = None,
    connection: str = "AzureWebJobsStorage",
    client: ContainerClient | None = None,
) -> str:
    """Store `mail` as a new blob; creates the container on first use. Returns the blob name.

    `client` is the outbox container's client; without one, `container` of `connection`.
    """
    if client is None:
        client = outbox_client(container, connection)
    name = outbox_blob_name(event_id)
    data = json.dumps(mail, ensure_ascii=False, sort_keys=True).encode("utf-8")
    content = ContentSettings(content_type="application/json; charset=utf-8")
    blob = client.get_blob_client(name)

    def upload() -> None:
        if upload_if(blob, data, overwrite=False, content_settings=content) is None:
            # The name is a new uuid4: only another writer's blob could be there already.
            raise ResourceExistsError(f"outbox blob {name} was written by another send")

    try:
        upload()
    except ResourceNotFoundError:
        # One extra request the first time only, instead of a create call on every send.
        with contextlib.suppress(ResourceExistsError):
            client.create_container()
        upload()
    return name


def read_outbox(
    container: str | None = None,
    *,
    event_id: str | None = None,
    connection: str = "AzureWebJobsStorage",
) -> list[OutboxEmail]:
    """Every email in the outbox (or those of one event id), oldest first; [] if none yet."""
    client = outbox_client(container, connection)
    prefix = f"{encode_key(validate_key(event_id))}/" if event_id is not None else None
    emails: list[OutboxEmail] = []
    try:
        blobs = list(client.list_blobs(name_starts_with=prefix))
    except ResourceNotFoundError:
        return []
    for blob in blobs:
        folder, _, _ = blob.name.partition("/")
        mail = json.loads(client.download_blob(blob.name).readall())
        emails.append(
            OutboxEmail(
                event_id=urllib.parse.unquote(folder),
                blob_name=blob.name,
                mail=mail,
                created=blob.creation_time,
            )
        )
    emails.sort(key=lambda e: (e.created or datetime.min.replace(tzinfo=UTC), e.blob_name))
    return emails
