"""One page of List Blobs with metadata, parsed without the SDK's models (docs/internals.md),
and `scan`: a filtered listing over several prefixes, page by page, with an honest marker."""

from __future__ import annotations

import base64
import binascii
import json

# The storage service's answer over the client's authenticated pipeline, parsed as the SDK's
# own deserialiser parses it (ElementTree: no external entities; expat bounds expansion).
import xml.etree.ElementTree as ElementTree  # nosec B405
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar
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


# -- a filtered listing over several prefixes, one page at a time ------------------------------

#: List Blobs requests one `scan` call sends at most: a call that reaches it before its page
#: is full answers what it found, with the marker where it stopped (`Scanned.partial`).
MAX_SCAN_REQUESTS = 10
#: Blobs asked per request while a filter may pass over most of them (the service's maximum
#: is 5,000); without a filter a request asks for what the page still needs.
SCAN_PAGE = 1000

T = TypeVar("T")
#: One page of one prefix: (prefix, size, storage's marker) -> ([(name, item or None)], next
#: marker). An item None (or one `keep` refuses) is passed over.
Fetch = Callable[[str, int, str | None], tuple[list[tuple[str, T | None]], str | None]]


@dataclass(frozen=True, slots=True)
class Scanned(Generic[T]):
    items: list[T]
    #: The marker of the next call (None: the listing ended).
    next_marker: str | None
    #: True when the request bound came before the page was full: more may match after it.
    partial: bool
    requests: int


def _marker(prefix: str, storage: str | None, after: str | None) -> str:
    raw = json.dumps({"p": prefix, "m": storage, "a": after}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _resume(marker: str) -> tuple[str, str | None, str | None]:
    try:
        data = json.loads(base64.urlsafe_b64decode(marker + "=" * (-len(marker) % 4)))
        prefix, storage, after = data["p"], data["m"], data["a"]
        if not isinstance(prefix, str) or not all(
            v is None or isinstance(v, str) for v in (storage, after)
        ):
            raise TypeError
    except (ValueError, TypeError, KeyError, binascii.Error):
        raise ValueError("the next marker is not one this listing gave") from None
    return prefix, storage, after


def scan(
    prefixes: Sequence[str],
    fetch: Fetch[T],
    limit: int,
    marker: str | None = None,
    keep: Callable[[T], bool] | None = None,
) -> Scanned[T]:
    """Up to `limit` items of the blobs named from each of `prefixes` (sorted), in name order,
    that `fetch` turns into items and `keep` keeps: storage pages are listed until the page is
    full or the listing ends, at most MAX_SCAN_REQUESTS of them. The next marker names the
    prefix, storage's marker and the last blob taken, so a page that filled half-way through
    a storage page resumes right after it (that storage page is asked for again).
    `ValueError` for a marker this function did not give."""
    ordered = sorted(set(prefixes))
    first = ordered[0] if ordered else ""
    start, storage, after = _resume(marker) if marker else (first, None, None)
    remaining = [p for p in ordered if p >= start]
    if remaining and remaining[0] != start:  # the marker's prefix is gone: start the next
        storage = after = None
    items: list[T] = []
    requests = 0
    for index, prefix in enumerate(remaining):
        while True:
            if requests == MAX_SCAN_REQUESTS:
                return Scanned(items, _marker(prefix, storage, after), True, requests)
            wanted = limit - len(items)
            sparse = keep is not None or after is not None  # most of a page may be passed over
            size = min(5000, max(wanted, SCAN_PAGE) if sparse else wanted)
            page, following = fetch(prefix, size, storage)
            requests += 1
            for position, (name, item) in enumerate(page):
                if after is not None and name <= after:
                    continue
                if item is None or (keep is not None and not keep(item)):
                    continue
                items.append(item)
                if len(items) == limit:
                    if position + 1 < len(page):
                        return Scanned(items, _marker(prefix, storage, name), False, requests)
                    if following:
                        return Scanned(items, _marker(prefix, following, None), False, requests)
                    if index + 1 < len(remaining):
                        return Scanned(items, _marker(remaining[index + 1], None, None), False,
                                       requests)  # fmt: skip
                    return Scanned(items, None, False, requests)
            after = None
            storage = following
            if not storage:
                break
    return Scanned(items, None, False, requests)
