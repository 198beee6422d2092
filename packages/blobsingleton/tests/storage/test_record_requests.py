"""The record store's requests (`_blob_records.RecordRequests`) against Azurite.

They go over the container client's own pipeline, read without the SDK's models and with no
client built per blob. They must answer as the SDK's calls do, and those calls are the
fallback where a client lends no pipeline. Covered here: awkward keys; each way reading what
the other wrote; conflicts and absences as the SDK reports them; a missing container; a SAS
client; the application's response hook still called; storage's dates read as `email.utils`
reads them.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime, parsedate_to_datetime
from typing import Any

import pytest
from azure.core.exceptions import IncompleteReadError
from azure.core.pipeline.transport import RequestsTransport
from azure.storage.blob import (
    BlobServiceClient,
    ContainerClient,
    ContainerSasPermissions,
    generate_container_sas,
)
from blobsingleton import StorageAccount, _blob_records
from blobsingleton._connection import http_date
from blobsingleton.errors import RecordConflict, StorageUnavailable
from blobsingleton.records import BlobRecordStore, Record, Status
from libsupport import ACCOUNT, KEY, blob_service

KEYS = [
    "plain",
    "with space",
    "amp&<gt>",
    "per%cent+plus",
    "ünïcode-名前",
    "deep/er/still",
    "quote'\"",
    "é" * 160,
]  # fmt: skip (a blob name of 969 characters)


def _record(key: str, status: Status = Status.IN_PROGRESS, result: Any = None) -> Record:
    return Record(key=key, status=status, started_at=1.0, expires_at=2.0, owner="me",
                  claim="c1", ttl=60.0, result=result)  # fmt: skip


def _container(name: str | None = None, create: bool = True) -> Any:
    client = blob_service().get_container_client(name or f"requests-{uuid.uuid4().hex[:10]}")
    if create:
        client.create_container()
    return client


def _store(container: Any, *, sdk: bool, monkeypatch: pytest.MonkeyPatch) -> BlobRecordStore:
    """A store whose requests go over the pipeline, or (`sdk`) through the SDK's calls, as
    where the client lends no pipeline."""
    with monkeypatch.context() as patch:
        if sdk:
            patch.setattr(_blob_records, "pipeline_sender", lambda container: None)
        return BlobRecordStore(container=container, namespace="requests")


def _same(read: Record | None, written: Record) -> None:
    assert read is not None
    assert read.with_(read_at=None, written_at=None) == written.with_(read_at=None,
                                                                      written_at=None)  # fmt: skip
    assert read.read_at is not None and written.written_at is not None


@pytest.mark.parametrize("writer_sdk", [False, True], ids=["pipeline-writes", "sdk-writes"])
def test_each_way_reads_what_the_other_wrote_and_refuses_the_same(
    storage_env: str, monkeypatch: pytest.MonkeyPatch, writer_sdk: bool
) -> None:
    container = _container()
    writer = _store(container, sdk=writer_sdk, monkeypatch=monkeypatch)
    reader = _store(container, sdk=not writer_sdk, monkeypatch=monkeypatch)
    for key in KEYS:
        created = writer.put_if_absent(_record(key))
        assert created.etag and created.etag.startswith('"')
        _same(reader.get(key), created)
        with pytest.raises(RecordConflict):
            reader.put_if_absent(_record(key))  # If-None-Match: *
        done = reader.replace(_record(key, Status.COMPLETED, {"sent": key}), created.etag)
        _same(writer.get(key), done)
        with pytest.raises(RecordConflict):
            writer.replace(_record(key), created.etag)  # If-Match, a stale etag
        with pytest.raises(RecordConflict):
            writer.delete(key, created.etag)
        reader.delete(key, done.etag or "")
        assert writer.get(key) is None and reader.get(key) is None


@pytest.mark.parametrize("sdk", [False, True], ids=["pipeline", "sdk"])
def test_a_missing_container_reads_as_no_record_and_is_made_by_the_first_create(
    storage_env: str, monkeypatch: pytest.MonkeyPatch, sdk: bool
) -> None:
    container = _container(create=False)
    store = _store(container, sdk=sdk, monkeypatch=monkeypatch)
    assert store.get("k") is None
    created = store.put_if_absent(_record("k"))
    assert container.exists()
    _same(store.get("k"), created)


@pytest.mark.parametrize("sdk", [False, True], ids=["pipeline", "sdk"])
def test_the_watchers_read_is_unchanged_while_the_etag_holds(
    storage_env: str, monkeypatch: pytest.MonkeyPatch, sdk: bool
) -> None:
    store = _store(_container(), sdk=sdk, monkeypatch=monkeypatch)
    created = store.put_if_absent(_record("k"))
    name = store._name("k")
    unchanged = store.read_unless(name, created.etag)  # If-None-Match: 304
    assert unchanged.present and unchanged.etag == created.etag and unchanged.record is None
    done = store.replace(_record("k", Status.COMPLETED, 7), created.etag or "")
    changed = store.read_unless(name, created.etag)
    assert changed.record is not None and changed.record.result == 7
    assert changed.etag == done.etag
    store.delete("k", done.etag or "")
    assert not store.read_unless(name, done.etag).present


def test_a_sas_client_sends_its_token_with_each_request(storage_env: str) -> None:
    container = _container()
    sas = generate_container_sas(
        ACCOUNT, container.container_name, account_key=KEY,
        permission=ContainerSasPermissions(read=True, write=True, create=True, delete=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )  # fmt: skip
    with_sas = ContainerClient.from_container_url(container.url, credential=sas)
    assert "sig=" in with_sas.url
    store = BlobRecordStore(container=with_sas, namespace="requests")
    created = store.put_if_absent(_record("ünïcode key"))
    _same(store.get("ünïcode key"), created)
    store.delete("ünïcode key", created.etag or "")
    assert store.get("ünïcode key") is None


def test_requests_go_over_the_clients_pipeline_with_its_hook_and_no_client_per_blob(
    storage_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    service = BlobServiceClient.from_connection_string(
        storage_env, raw_response_hook=lambda r: seen.append(r.http_request.method)
    )
    container = service.get_container_client(f"requests-{uuid.uuid4().hex[:10]}")
    container.create_container()
    seen.clear()

    def no_client(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a BlobClient was built for a record request")

    monkeypatch.setattr(ContainerClient, "get_blob_client", no_client)
    store = BlobRecordStore(container=container, namespace="requests")
    created = store.put_if_absent(_record("k"))
    store.get("k")
    store.delete("k", created.etag or "")
    assert seen == ["PUT", "GET", "DELETE"]  # the application's hook saw each one


def test_storages_dates_read_as_email_utils_reads_them() -> None:
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    for hours in range(0, 24 * 400, 37):
        when = moment + timedelta(hours=hours, seconds=hours % 60)
        text = format_datetime(when, usegmt=True)  # storage's form
        assert http_date(text) == parsedate_to_datetime(text) == when
    for other in ("Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994",
                  "Sun, 06 Nov 1994 08:49:37 +0000"):  # fmt: skip
        assert http_date(other) == parsedate_to_datetime(other)
    for bad in ("", None, "Sun, 31 Feb 2026 08:49:37 GMT", "Sun, 06 Nov 1994 25:49:37 GMT",
                "not a date"):  # fmt: skip
        assert http_date(bad) is None


class BodyBreaksOff(RequestsTransport):
    """The real transport, but the first `times` reads of a record's body break off after its
    headers arrived (a connection lost mid-answer), as the pipeline's retries cannot see."""

    def __init__(self, times: int) -> None:
        super().__init__()
        self.times = times

    def send(self, request: Any, **kwargs: Any) -> Any:
        response = super().send(request, **kwargs)
        if request.method == "GET" and "comp=list" not in request.url and self.times > 0:
            self.times -= 1

            def broken() -> bytes:
                response.internal_response.close()
                raise IncompleteReadError("the answer's body broke off")

            response.read = broken
        return response


@pytest.mark.parametrize("breaks", [2, 3])
def test_a_read_whose_body_breaks_off_is_sent_again_twice_at_most(
    storage_env: str, breaks: int
) -> None:
    container = _container()
    created = BlobRecordStore(container=container, namespace="requests").put_if_absent(_record("k"))
    transport = BodyBreaksOff(breaks)
    account = StorageAccount(connection_string=storage_env, client_options={"transport": transport})
    reader = BlobRecordStore(
        container=account.blob_service().get_container_client(container.container_name),
        namespace="requests",
    )
    if breaks == 2:  # sent three times in all, as the SDK's downloads are
        _same(reader.get("k"), created)
    else:
        with pytest.raises(StorageUnavailable):
            reader.get("k")
    assert transport.times == 0
