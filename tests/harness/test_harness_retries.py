"""The harness survives the faults it injects: its own reads and writes, through the fault
proxy at 10 % ServerBusy and 10 % lost answers against a real Azurite, complete, where the
app's own retry budget (3) fails within the same calls (issue 42, part 5).

The waits between retries are zeroed here (`kit.RETRY`): what is tested is how many times a
request is retried; their timing is the library's `RETRY`, unchanged."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError
from azure.data.tables import TableServiceClient
from azure.storage.blob import LinearRetry
from blobsingleton import StorageAccount
from blobsingleton.config import RETRY

from harness import kit, services
from harness.fault_proxy import SERVER_ERROR_KINDS, parse_rates
from harness.injectors import fault_proxies, proxied_connection_string

#: The issue's load: 10 % ServerBusy (not forwarded), 10 % lost answers (forwarded, then 500).
RATES = "503=0.1,500=0.1"
POLLS = 300


@pytest.fixture
def no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kit, "RETRY", {**RETRY, "backoff": 0.0, "random_jitter_range": 0})


def _faults(proxies: dict[str, Any]) -> int:
    return sum(int(p.counts.get(kind, 0)) for p in proxies.values() for kind in SERVER_ERROR_KINDS)


def test_the_harness_feeds_watches_and_reads_through_ten_and_ten_percent_faults(
    azurite: services.Azurite, no_waits: None
) -> None:
    suffix = uuid.uuid4().hex[:8]
    queues = [f"h-{suffix}-{i}" for i in range(4)]
    container, table = f"h-{suffix}", f"H{suffix}"
    with fault_proxies(azurite, 1, parse_rates(RATES)) as proxies:
        account = StorageAccount(connection_string=proxied_connection_string(proxies))
        kit.reset_queues(queues, account)
        kit.create_containers([container], account)
        sent = kit.enqueue_all(((q, b"event") for q in queues for _ in range(25)), account, 1)
        depths = [kit.queue_depths(queues, account) for _ in range(POLLS)]  # the watch
        blobs = kit.harness_account(account).blob_service().get_container_client(container)
        for k in range(40):
            blobs.upload_blob(f"e{k:03d}", b"x" * k, overwrite=True)
        read = {b.name: blobs.download_blob(b.name).readall() for b in blobs.list_blobs()}
        tables = TableServiceClient.from_connection_string(
            proxied_connection_string(proxies), **kit.harness_table_options()
        )
        tables.create_table_if_not_exists(table)
        rows = list(tables.get_table_client(table).query_entities("PartitionKey eq 'p'"))
        faults = _faults(proxies)
    assert sent == 100 and len(depths) == POLLS and rows == []
    # a send whose answer was lost is sent again by the SDK: a copy at most, never a loss
    assert all(d[q] >= 25 for d in depths for q in queues)
    assert read == {f"e{k:03d}": b"x" * k for k in range(40)}
    assert faults > 200  # the load was there: about one request in five


def test_the_apps_own_retry_budget_alone_does_not_outlast_that_watch(
    azurite: services.Azurite,
) -> None:
    """What the harness's retries are for: the same watch with the app's 3 retries (no
    waits either) fails within the same number of polls."""
    queues = [f"a-{uuid.uuid4().hex[:8]}-{i}" for i in range(4)]
    apps = LinearRetry(**{**RETRY, "backoff": 0.0, "random_jitter_range": 0})
    with fault_proxies(azurite, 1, parse_rates(RATES)) as proxies:
        account = StorageAccount(connection_string=proxied_connection_string(proxies))
        kit.reset_queues(queues, account)
        plain = StorageAccount(connection_string=account.connection_string,
                               client_options={"retry_policy": apps})  # fmt: skip
        with pytest.raises(HttpResponseError):
            for _ in range(POLLS):
                for name in queues:  # kit.queue_depths' request, with the app's client
                    kit.encoded_queue_client(plain.queue_service(), name).get_queue_properties()
