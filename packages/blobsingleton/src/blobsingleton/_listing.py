"""One page of List Blobs with metadata, parsed without the SDK's models (docs/internals.md)."""

from __future__ import annotations

# The storage service's answer over the client's authenticated pipeline, parsed as the SDK's
# own deserialiser parses it (ElementTree: no external entities; expat bounds expansion).
import xml.etree.ElementTree as ElementTree  # nosec B405
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote, unquote

from blobsingleton._azure_sdk import pipeline_sender
from blobsingleton._connection import ServiceTime, epoch, http_date
from blobsingleton._storage_errors import answered_error


@dataclass(frozen=True, slots=True)
class Listed:
    """One listed blob: its name, etag (bare, as listings give it), Last-Modified, metadata."""

    name: str
    etag: str | None
    last_modified: datetime | None
    metadata: dict[str, str]


@dataclass(frozen=True, slots=True)
class Page:
    items: list[Listed]
    #: Where the next page starts (None: this was the last).
    next_marker: str | None
    #: The service's clock when it answered (epoch seconds; None without a `Date` header).
    served_at: float | None


def list_page(container: Any, prefix: str, size: int, marker: str | None = None) -> Page:
    """One page of at most `size` blobs named from `prefix`, with their metadata (1 request)."""
    send = pipeline_sender(container)
    if send is None:
        return _sdk_page(container, prefix, size, marker)
    from azure.core.rest import HttpRequest

    params = {"restype": "container", "comp": "list", "prefix": quote(prefix, safe=""),
              "maxresults": str(size), "include": "metadata"}  # fmt: skip
    if marker:
        params["marker"] = quote(marker, safe="")  # the request does not quote its params
    request = HttpRequest(
        "GET", container.url, params=params,
        headers={"x-ms-version": container.api_version, "Accept": "application/xml"},
    )  # fmt: skip
    response = send(request)
    if response.status_code >= 300:
        raise answered_error(response, "List Blobs")
    return _parse(response.read(), response.headers.get("Date"))


def list_all(container: Any, prefix: str, size: int = 5000) -> tuple[list[Listed], float | None]:
    """Every blob named from `prefix` (1 request per `size`), and the service's clock at the
    first answer."""
    page = first = list_page(container, prefix, size)
    items = list(page.items)
    while page.next_marker:
        page = list_page(container, prefix, size, page.next_marker)
        items += page.items
    return items, first.served_at


def _parse(body: bytes, date: str | None) -> Page:
    root = ElementTree.fromstring(body)  # nosec B314
    items = []
    for blob in root.iter("Blob"):
        name_element = blob.find("Name")
        name = (name_element.text or "") if name_element is not None else ""
        if name_element is not None and name_element.get("Encoded") == "true":
            name = unquote(name)
        properties = blob.find("Properties")
        etag = modified = None
        if properties is not None:
            etag = properties.findtext("Etag")
            modified = http_date(properties.findtext("Last-Modified"))
        found = blob.find("Metadata")
        metadata = {m.tag: m.text or "" for m in found} if found is not None else {}
        items.append(Listed(name, etag, modified, metadata))
    return Page(items, root.findtext("NextMarker") or None, epoch(http_date(date)))


def _sdk_page(container: Any, prefix: str, size: int, marker: str | None) -> Page:
    served = ServiceTime(container)
    pages = container.list_blobs(
        name_starts_with=prefix, include=["metadata"], results_per_page=size,
        raw_response_hook=served,
    ).by_page(continuation_token=marker)  # fmt: skip
    try:
        found = list(next(pages))
    except StopIteration:
        found = []
    items = [Listed(b.name, b.etag, b.last_modified, dict(b.metadata or {})) for b in found]
    return Page(items, pages.continuation_token or None, served.at)
