"""The fault proxy passes bytes through, injects each fault kind, and is deterministic per seed;
with server errors on, it answers request by request as Azure does under load, and the SDK
parses its answers as Azure's."""

from __future__ import annotations

import socket
import socketserver
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError
from azure.data.tables import TableServiceClient
from azure.storage.blob import BlobServiceClient, LinearRetry
from azure.storage.queue import QueueServiceClient

from harness import services
from harness.fault_proxy import SERVER_ERROR_KINDS, FaultProxy, FaultRates, parse_rates
from harness.http_messages import Message


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _round_trip(port: int, payload: bytes, timeout: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(payload)
        received = b""
        while len(received) < len(payload):
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionResetError("closed before the echo came back")
            received += chunk
        return received


def test_without_faults_bytes_pass_through(echo_port: int) -> None:
    with FaultProxy(echo_port, FaultRates(), seed=1) as proxy:
        payload = bytes(range(256)) * 1000
        assert _round_trip(proxy.listen_port, payload) == payload
        assert sum(proxy.counts.values()) == 0


def test_reset_drops_the_connection(echo_port: int) -> None:
    with FaultProxy(echo_port, FaultRates(reset=1.0), seed=1) as proxy:
        with pytest.raises(OSError):
            _round_trip(proxy.listen_port, b"hello")
        assert proxy.counts["reset"] == 1


def test_stall_outlasts_the_client_timeout(echo_port: int) -> None:
    with FaultProxy(echo_port, FaultRates(stall=1.0, stall_seconds=5), seed=1) as proxy:
        with pytest.raises(TimeoutError):
            _round_trip(proxy.listen_port, b"hello", timeout=0.5)
        assert proxy.counts["stall"] == 1


def test_latency_still_delivers(echo_port: int) -> None:
    with FaultProxy(echo_port, FaultRates(latency=1.0, latency_seconds=0.05), seed=1) as proxy:
        assert _round_trip(proxy.listen_port, b"hello") == b"hello"
        assert proxy.counts["latency"] == 1


def test_disabled_proxy_injects_nothing(echo_port: int) -> None:
    with FaultProxy(echo_port, FaultRates(reset=1.0), seed=1) as proxy:
        proxy.set_enabled(False)
        assert _round_trip(proxy.listen_port, b"hello") == b"hello"
        assert sum(proxy.counts.values()) == 0


def test_same_seed_same_fault_sequence() -> None:
    rates = FaultRates(reset=0.2, stall=0.1, latency=0.3)
    a, b, c = (FaultProxy(1, rates, seed=s) for s in (7, 7, 8))
    seq_a = [a.draw() for _ in range(200)]
    assert seq_a == [b.draw() for _ in range(200)]
    assert seq_a != [c.draw() for _ in range(200)]
    assert {"reset", "stall", "latency", None} <= set(seq_a)


def test_rates_are_validated() -> None:
    with pytest.raises(ValueError, match="sum to <= 1"):
        FaultRates(reset=0.6, stall=0.6)


# -- server errors, request by request, against Azurite -----------------------------------------


def _blob_service(azurite: services.Azurite, blob_port: int, **options: Any) -> BlobServiceClient:
    connection = services.azurite_connection_string(
        "127.0.0.1", blob_port, azurite.queue_port, azurite.table_port
    )
    return BlobServiceClient.from_connection_string(connection, **options)


def test_a_503_is_answered_as_azure_does_without_reaching_storage(
    azurite: services.Azurite,
) -> None:
    rates = FaultRates(server_busy=1.0)
    with FaultProxy(azurite.blob_port, rates, seed=1, service="blob") as proxy:
        client = _blob_service(azurite, proxy.listen_port, retry_total=0)
        name = f"busy-{uuid.uuid4().hex[:8]}"
        with pytest.raises(HttpResponseError) as raised:
            client.create_container(name)
        with pytest.raises(HttpResponseError) as head:  # HEAD: the code from the header
            client.get_blob_client(name, "b").get_blob_properties()
    error = raised.value
    assert (error.status_code, error.error_code) == (503, "ServerBusy")
    assert "RequestId:" in str(error.message) and "unable to receive requests" in error.message
    assert error.response is not None and error.response.headers["x-ms-request-id"]
    assert error.response.headers["Date"] and head.value.error_code == "ServerBusy"
    assert not _blob_service(azurite, azurite.blob_port).get_container_client(name).exists()
    assert proxy.counts["server_busy"] == proxy.requests == 2
    assert [e.underlying_status for e in proxy.injected] == [None, None]


@pytest.mark.parametrize("kind", ["operation_timed_out", "internal_error"])
def test_a_500_is_answered_after_the_request_landed(azurite: services.Azurite, kind: str) -> None:
    rates = FaultRates(**{kind: 1.0})
    with FaultProxy(azurite.blob_port, rates, seed=1, service="blob") as proxy:
        client = _blob_service(azurite, proxy.listen_port, retry_total=0)
        name = f"late-{uuid.uuid4().hex[:8]}"
        with pytest.raises(HttpResponseError) as raised:
            client.create_container(name)
    code = {"operation_timed_out": "OperationTimedOut", "internal_error": "InternalError"}[kind]
    assert (raised.value.status_code, raised.value.error_code) == (500, code)
    assert _blob_service(azurite, azurite.blob_port).get_container_client(name).exists()
    [noted] = proxy.injected
    assert (noted.kind, noted.method, noted.comp, noted.underlying_status) == (
        kind, "PUT", "container", 201
    )  # fmt: skip


def test_table_requests_get_the_tables_json_error_and_queue_requests_the_xml_one(
    azurite: services.Azurite,
) -> None:
    rates = FaultRates(server_busy=1.0)
    with (
        FaultProxy(azurite.table_port, rates, seed=1, service="table") as tables,
        FaultProxy(azurite.queue_port, rates, seed=1, service="queue") as queues,
    ):
        connection = services.azurite_connection_string(
            "127.0.0.1", azurite.blob_port, queues.listen_port, tables.listen_port
        )
        table = TableServiceClient.from_connection_string(connection, retry_total=0)
        queue = QueueServiceClient.from_connection_string(connection, retry_total=0)
        with pytest.raises(HttpResponseError) as table_error:
            table.create_table(f"T{uuid.uuid4().hex[:8]}")
        with pytest.raises(HttpResponseError) as queue_error:
            queue.create_queue(f"q-{uuid.uuid4().hex[:8]}")
    answer = table_error.value.response
    assert answer is not None and answer.headers["Content-Type"].startswith("application/json")
    assert table_error.value.status_code == 503
    assert str(getattr(table_error.value.error_code, "value", "")) == "ServerBusy"
    assert "unable to receive requests" in str(table_error.value.message)
    assert (queue_error.value.status_code, queue_error.value.error_code) == (503, "ServerBusy")


def test_kept_alive_connections_carry_every_request_whole_with_faults_among_them(
    azurite: services.Azurite,
) -> None:
    rates = FaultRates(server_busy=0.1, operation_timed_out=0.1, internal_error=0.1)
    retry = LinearRetry(backoff=0, random_jitter_range=0, retry_total=10)
    with FaultProxy(azurite.blob_port, rates, seed=3, service="blob") as proxy:
        container = _blob_service(azurite, proxy.listen_port, retry_policy=retry)
        container = container.get_container_client(f"kept-{uuid.uuid4().hex[:8]}")
        container.create_container()
        bodies = {f"b{i:02d}": bytes([i]) * (i * 997) for i in range(30)}
        for name, body in bodies.items():
            container.upload_blob(name, body, overwrite=True)
        read = {b.name: container.download_blob(b.name).readall() for b in container.list_blobs()}
    assert read == bodies
    faults = sum(proxy.counts[k] for k in SERVER_ERROR_KINDS)
    assert faults > 0 and proxy.requests > len(bodies) * 2 + faults


def test_same_seed_same_server_errors_and_spared_paths_draw_none() -> None:
    rates = FaultRates(server_busy=0.1, operation_timed_out=0.1, internal_error=0.1)
    request = Message(b"", b"", "PUT /devstoreaccount1/runonce/k HTTP/1.1", ())
    spared = Message(b"", b"", "PUT /devstoreaccount1/outbox-1/e HTTP/1.1", ())
    a, b, c = (FaultProxy(1, rates, seed=s, spare=("/devstoreaccount1/outbox",)) for s in (7, 7, 8))
    seq_a = [a.draw_request(request) for _ in range(300)]
    assert seq_a == [b.draw_request(request) for _ in range(300)]
    assert seq_a != [c.draw_request(request) for _ in range(300)]
    assert set(seq_a) == {*SERVER_ERROR_KINDS, None}
    assert {a.draw_request(spared) for _ in range(100)} == {None} and a.requests == 300


def test_rates_parse_with_the_status_shorthands() -> None:
    rates = parse_rates("503=0.03,500=0.03,reset=0.1")
    assert (rates.server_busy, rates.operation_timed_out, rates.internal_error) == (
        0.03, 0.015, 0.015
    )  # fmt: skip
    assert rates.reset == 0.1 and rates.per_request
    for bad in ("504=0.1", "503=x", "503=0.6,500=0.6", "503"):
        with pytest.raises(ValueError):
            parse_rates(bad)
