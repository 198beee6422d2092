"""The Azure SDK internals the library reads (`_azure_sdk`) are there in the installed SDK.

Each has a fallback, so an upgrade that removes one changes cost, not behaviour: these fail
so the upgrade is noticed instead of quietly costing more (listings at four times the client
CPU, an application's response hook not called for the library's reads of storage's clock).
"""

from __future__ import annotations

from typing import Any

from azure.storage.blob import BlobServiceClient
from blobsingleton import _azure_sdk
from blobsingleton._connection import ServiceTime

CONNECTION = (
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;"
    "BlobEndpoint=http://127.0.0.1:1/devstoreaccount1;"
)


def test_a_container_client_lends_its_pipeline_to_listings() -> None:
    container = BlobServiceClient.from_connection_string(CONNECTION).get_container_client("c")
    assert _azure_sdk.pipeline_sender(container) is not None


def test_a_client_built_with_a_response_hook_keeps_it_reachable() -> None:
    seen: list[Any] = []
    client = BlobServiceClient.from_connection_string(CONNECTION, raw_response_hook=seen.append)
    container = client.get_container_client("c")
    assert _azure_sdk.response_hook(container) == seen.append

    class Response:
        class http_response:
            headers = {"Date": "Tue, 24 Nov 2026 05:00:00 GMT"}

    response = Response()
    served = ServiceTime(container)  # the library's per-call hook, which replaces the client's
    served(response)
    assert served.at is not None
    assert seen == [response], "the application's own hook was not called in turn"


def test_anything_else_gets_the_public_fallback() -> None:
    assert _azure_sdk.pipeline_sender(object()) is None
    assert _azure_sdk.response_hook(object()) is None
