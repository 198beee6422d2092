"""Each `RecordStore` operation of the blob store is one storage request, as the lock blob's
are (issue 40): counted at a real HTTP proxy in front of Azurite (`harness.fault_proxy`, no
faults), each operation in a fresh process whose store has never seen the key, for a new key
and an existing one. What makes claims fast is beside the store (`_speed.SpeedLayer`), not in it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from azure.storage.blob import BlobServiceClient

from harness import services
from harness.fault_proxy import FaultProxy, FaultRates

OPERATION = str(Path(__file__).with_name("record_operation.py"))


def _run(proxy: FaultProxy, env: dict[str, str], *args: str) -> tuple[str, int]:
    """What one operation in a fresh process printed, and the requests the proxy saw for it."""
    before = proxy.requests
    done = subprocess.run(
        [sys.executable, OPERATION, *args], env=env, capture_output=True, text=True, timeout=60,
        check=True,
    )  # fmt: skip
    return done.stdout.strip(), proxy.requests - before


def test_each_operation_of_the_blob_record_store_is_one_request(
    azurite: services.Azurite, storage_env: str
) -> None:
    container = os.environ["RUNONCE_CONTAINER"]
    BlobServiceClient.from_connection_string(storage_env).create_container(container)
    # A rate above 0 makes the proxy read (and count) every request; at 1e-12, seeded, it
    # injects nothing.
    rates = FaultRates(server_busy=1e-12)
    with FaultProxy(azurite.blob_port, rates, seed=1, service="blob") as proxy:
        connection = services.azurite_connection_string(
            "127.0.0.1", proxy.listen_port, azurite.queue_port, azurite.table_port
        )
        env = {**os.environ, "AzureWebJobsStorage": connection, "RUNONCE_CONTAINER": container}
        key = f"counted-{uuid.uuid4().hex[:8]}"
        assert _run(proxy, env, "get", key) == ("absent", 1)
        assert not proxy.injected
        created, requests = _run(proxy, env, "put_if_absent", key)  # a new key
        assert created.startswith('"') and requests == 1
        assert _run(proxy, env, "put_if_absent", key) == ("conflict", 1)  # an existing key
        assert _run(proxy, env, "get", key) == (created, 1)
        replaced, requests = _run(proxy, env, "replace", key, created)
        assert replaced.startswith('"') and replaced != created and requests == 1
        assert _run(proxy, env, "replace", key, created) == ("conflict", 1)  # a stale etag
        assert _run(proxy, env, "delete", key, created) == ("conflict", 1)
        assert _run(proxy, env, "delete", key, replaced) == ("deleted", 1)
        assert _run(proxy, env, "get", key) == ("absent", 1)
        assert not proxy.injected
