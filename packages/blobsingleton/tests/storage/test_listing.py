"""The library's own List Blobs page (`_listing`) against Azurite: the same answer as the SDK's
`list_blobs`, page by page, for awkward names and metadata, through shared-key and SAS
clients; the SDK's errors; one counted request per page; the SDK's listing where the client's
pipeline is not reachable."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import ContainerClient, ContainerSasPermissions, generate_container_sas
from blobsingleton._listing import Listed, _parse, _sdk_page, list_all, list_page
from blobsingleton.testing import RequestCounter
from libsupport import ACCOUNT, KEY, blob_service

NAMES = [
    "ns/plain", "ns/with space", "ns/amp&lt<gt>", "ns/per%cent+plus", "ns/ünïcode-名前",
    "ns/deep/er/still", "ns/quote'\"", "ns/z-last", "other/outside",
]  # fmt: skip


@pytest.fixture
def container(storage_env: str) -> Any:
    client = blob_service().get_container_client(f"listing-{uuid.uuid4().hex[:10]}")
    client.create_container()
    for i, name in enumerate(NAMES):
        metadata = {"record": f"eyJ{i}", "ttl": str(60 * i)} if i % 2 == 0 else {}
        client.upload_blob(name, b"x", metadata=metadata)
    return client


def _pages(lister: Any, container: Any, prefix: str, size: int) -> list[list[Listed]]:
    pages, marker = [], None
    while True:
        page = lister(container, prefix, size, marker)
        pages.append(page.items)
        assert page.served_at is not None
        if not page.next_marker:
            return pages
        marker = page.next_marker


def test_a_page_is_what_the_sdks_listing_says_page_by_page(container: Any) -> None:
    ours = _pages(list_page, container, "ns/", 3)
    sdk = _pages(_sdk_page, container, "ns/", 3)
    assert ours == sdk
    assert [len(p) for p in ours] == [3, 3, 2]
    listed = {item.name: item for page in ours for item in page}
    assert set(listed) == {n for n in NAMES if n.startswith("ns/")}
    assert listed["ns/plain"].metadata == {"record": "eyJ0", "ttl": "0"}
    assert listed["ns/with space"].metadata == {}
    assert all(item.etag and item.last_modified for item in listed.values())


def test_a_sas_client_lists_the_same(container: Any) -> None:
    sas = generate_container_sas(
        ACCOUNT, container.container_name, account_key=KEY,
        permission=ContainerSasPermissions(list=True, read=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )  # fmt: skip
    with_sas = ContainerClient.from_container_url(container.url, credential=sas)
    assert "sig=" in with_sas.url  # the listing's parameters join the SAS's query
    assert list_all(with_sas, "ns/", 4)[0] == list_all(container, "ns/", 4)[0]


def test_a_missing_container_is_the_sdks_error(storage_env: str) -> None:
    missing = blob_service().get_container_client(f"missing-{uuid.uuid4().hex[:10]}")
    for lister in (list_page, _sdk_page):
        with pytest.raises(HttpResponseError) as raised:
            lister(missing, "ns/", 5, None)
        assert raised.value.status_code == 404
        assert getattr(raised.value, "error_code", None) == "ContainerNotFound"


def test_a_page_is_one_request(container: Any) -> None:
    counter = RequestCounter()  # this client's own: another test's lease renewals not counted
    counted = ContainerClient.from_container_url(
        container.url, credential={"account_name": ACCOUNT, "account_key": KEY},
        raw_request_hook=counter,
    )  # fmt: skip
    page = list_page(counted, "ns/", 100)
    assert len(page.items) == 8 and page.next_marker is None
    assert counter.by_method() == {"GET": 1}


class _Wrapped:
    """A stand-in for a ContainerClient that offers only its public methods."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.listings = 0

    def list_blobs(self, **options: Any) -> Any:
        self.listings += 1
        return self._inner.list_blobs(**options)


def test_without_the_clients_pipeline_the_sdks_listing_answers(container: Any) -> None:
    wrapped = _Wrapped(container)
    assert list_all(wrapped, "ns/", 5)[0] == list_all(container, "ns/", 5)[0]
    assert wrapped.listings == 2


def test_names_the_service_percent_encodes_are_decoded() -> None:
    # Names with characters XML cannot carry come back percent-encoded with Encoded="true"
    # (List Blobs, versions 2020-04-08 and later).
    body = (
        b'<?xml version="1.0" encoding="utf-8"?><EnumerationResults><Blobs><Blob>'
        b'<Name Encoded="true">ns%2Fbell%07</Name><Properties>'
        b"<Last-Modified>Tue, 24 Nov 2026 05:00:00 GMT</Last-Modified><Etag>0x8D1</Etag>"
        b"</Properties><Metadata><record>abc</record></Metadata></Blob></Blobs>"
        b"<NextMarker /></EnumerationResults>"
    )
    page = _parse(body, "Tue, 24 Nov 2026 05:00:01 GMT")
    assert page.items == [
        Listed("ns/bell\x07", "0x8D1", datetime(2026, 11, 24, 5, tzinfo=UTC), {"record": "abc"})
    ]
    assert page.next_marker is None
    assert page.served_at == datetime(2026, 11, 24, 5, 0, 1, tzinfo=UTC).timestamp()


# -- the operators' listings: prefix and filters applied by the listing, not per page ----------


def _records(count: int) -> None:
    """`count` completed records sorting before the ones under test, two in progress (one of a
    function's own) and one expired: the trial's 69."""
    import time

    from blobsingleton.records import BlobRecordStore, Record, Status

    now = time.time()
    store = BlobRecordStore()
    for i in range(count):
        store.put_if_absent(Record(f"a-email-{i:03}", Status.COMPLETED, now + 600, now - 5))
    store.put_if_absent(Record("nightly-import-2026", Status.IN_PROGRESS, now + 600, now - 5))
    BlobRecordStore(scope="import_account").put_if_absent(
        Record("import-acme-2026", Status.IN_PROGRESS, now + 600, now - 5)
    )
    store.put_if_absent(Record("nightly-import-2025", Status.IN_PROGRESS, now - 60, now - 900))


def test_a_state_filter_fills_the_page_from_the_whole_listing(storage_env: str) -> None:
    from blobsingleton import ops

    _records(66)
    page = ops.list_runs(state="in_progress", limit=50)
    assert sorted(i["key"] for i in page.items) == ["import-acme-2026", "nightly-import-2026"]
    assert page.next is None and not page.partial
    assert [i["key"] for i in ops.list_runs(state="expired", limit=50).items] == [
        "nightly-import-2025"
    ]
    assert ops.count_runs() == {"in_progress": 2, "completed": 66, "expired": 1}
    # unfiltered, pages of 50 then 19: every record once, in order, the marker honest
    first = ops.list_runs(limit=50)
    assert len(first.items) == 50 and first.next
    second = ops.list_runs(limit=50, marker=first.next)
    assert len(second.items) == 19 and second.next is None
    keys = [i["key"] for i in first.items + second.items]
    assert len(set(keys)) == 69


def test_a_prefix_is_the_listings_prefix_so_the_first_page_holds_the_match(
    storage_env: str,
) -> None:
    from blobsingleton import BlobLease, ops

    _records(30)
    page = ops.list_runs("nightly-import-2026", limit=10)
    assert [i["key"] for i in page.items] == ["nightly-import-2026"] and page.next is None
    # a function's own record is found under its scope by the same prefix
    [acme] = ops.list_runs("import-acme", limit=10).items
    assert acme["scope"] == "import_account"
    # a page that fills half-way through a storage page resumes right after its last item
    seen, marker = [], None
    while True:
        page = ops.list_runs("a-email-", limit=7, marker=marker)
        seen += [i["key"] for i in page.items]
        if not page.next:
            break
        marker = page.next
    assert seen == [f"a-email-{i:03}" for i in range(30)]
    with pytest.raises(ops.InvalidRequest, match="not one this listing gave"):
        ops.list_runs(marker="not-a-marker")
    # locks: the prefix goes to storage, and `held` filters the listing
    leases = [BlobLease(f"lock-{i:02}").acquire(timeout=10) for i in range(12)]
    for lease in leases[:11]:
        lease.release()
    held = ops.list_locks(limit=5, held=True)
    assert [i["key"] for i in held.items] == ["lock-11"] and held.next is None
    assert [i["key"] for i in ops.list_locks("lock-1", limit=5).items] == ["lock-10", "lock-11"]
    leases[11].release()


def test_a_filter_matching_little_of_a_long_listing_stops_at_its_request_bound(
    container: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from blobsingleton import _listing

    monkeypatch.setattr(_listing, "SCAN_PAGE", 1)
    monkeypatch.setattr(_listing, "MAX_SCAN_REQUESTS", 3)

    def fetch(prefix: str, size: int, marker: str | None) -> Any:
        page = list_page(container, prefix, size, marker)
        return [(i.name, i.name) for i in page.items], page.next_marker

    def last(name: str) -> bool:
        return name.endswith("last")

    found = _listing.scan(["ns/"], fetch, 1, keep=last)
    assert found.items == [] and found.partial and found.requests == 3 and found.next_marker
    items, marker = [], found.next_marker
    while marker:
        more = _listing.scan(["ns/"], fetch, 1, marker, keep=last)
        items, marker = items + more.items, more.next_marker
    assert items == ["ns/z-last"]
