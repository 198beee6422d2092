"""The host's own queue requests when storage answers as Azure does under load.

The sample app runs in a devhost worker whose storage goes through a `ScriptedProxy` in front
of the session's Azurite; chosen requests of the host (the delete after a success) are
answered 503 ServerBusy unforwarded, or 500 OperationTimedOut after they landed. The host
retries its own requests as the Functions host's clients do (about a second apart), and a
delete that landed before its answer was lost is done, not a failure.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from devhost_testkit import Records, StorageHelper, wait_for

from harness import services
from harness.fault_proxy import FaultRates
from harness.http_messages import Message
from tests.support import ScriptedProxy, writes_to


@pytest.fixture
def queue_proxy(azurite: services.Azurite) -> Iterator[ScriptedProxy]:
    with ScriptedProxy(azurite.queue_port, FaultRates(), seed=0, service="queue") as proxy:
        yield proxy


def _through(proxy: ScriptedProxy, azurite: services.Azurite) -> str:
    return services.azurite_connection_string(
        "127.0.0.1", azurite.blob_port, proxy.listen_port, azurite.table_port
    )


@pytest.mark.parametrize("kind", ["server_busy", "operation_timed_out"])
def test_a_delete_answered_with_an_error_is_retried_within_seconds_and_runs_nothing_again(
    start_host: Any,
    base_settings: dict[str, Any],
    storage: StorageHelper,
    records: Records,
    queue_proxy: ScriptedProxy,
    azurite: services.Azurite,
    tmp_path: Path,
    kind: str,
) -> None:
    queue = base_settings["SAMPLE_QUEUE"]
    settings = {**base_settings, "AzureWebJobsStorage": _through(queue_proxy, azurite)}
    host = start_host(settings, log_file=str(tmp_path / "host.log"))
    queue_proxy.arm(kind, writes_to(f"/{queue}/messages/", methods=("DELETE",)))
    storage.queue(queue).send_message(b"ok-1")
    wait_for(lambda: records.where(function="sample_queue", event="done", body="ok-1"))
    done_at = time.monotonic()
    wait_for(lambda: storage.depth(queue) == 0, timeout=15)
    gone_after = time.monotonic() - done_at
    assert queue_proxy.armed() == 0  # the delete was answered with the error
    # The host retries within a second; the Python SDK's own policy waited 15 s + 3 first:
    # 15 s tells them apart, over ten times what the retry takes on an idle machine.
    assert gone_after < 15.0, gone_after
    # Nothing ran again: a later message on the same queue is done before the host stops.
    storage.queue(queue).send_message(b"ok-2")
    wait_for(lambda: records.where(function="sample_queue", event="done", body="ok-2"))
    host.stop()
    assert len(records.where(function="sample_queue", event="start", body="ok-1")) == 1
    assert host.totals().successes == {"sample_queue": 2}  # ok-1 once, ok-2
    # Its own landed delete, met again by the SDK's retry (404), is not another delivery's.
    assert "already gone at delete" not in (tmp_path / "host.log").read_text()


def _updates(request: Message) -> bool:
    """Update Message: a renewal of a received message's invisibility."""
    return (
        request.method == "PUT"
        and "/messages/" in request.target
        and "popreceipt=" in (request.target)
    )


def test_a_renewal_answered_500_after_it_landed_ends_renewing_as_the_host_does(
    start_host: Any,
    base_settings: dict[str, Any],
    storage: StorageHelper,
    records: Records,
    queue_proxy: ScriptedProxy,
    azurite: services.Azurite,
) -> None:
    queue = base_settings["SAMPLE_QUEUE"]
    settings = {
        **base_settings,
        "AzureWebJobsStorage": _through(queue_proxy, azurite),
        "DEVHOST_INVOCATION_VISIBILITY": "15",  # renewed from 7.5 s on, every 5 s
    }
    host = start_host(settings)
    queue_proxy.arm("operation_timed_out", _updates)
    storage.queue(queue).send_message(b"sleep:19")
    wait_for(lambda: records.where(function="sample_queue", event="done"), timeout=40)
    host.stop()  # before the message reappears (the landed renewal kept it 15 s more)
    renewals = [r for r in queue_proxy.seen if _updates(r)]
    # The renewal landed (a new pop receipt) and its answer was replaced: the SDK sent it again
    # with the old receipt, which no longer matched. Then, as the host, no more renewals: the
    # message is no longer this delivery's to renew.
    assert queue_proxy.armed() == 0
    assert len(renewals) == 2, [r.target for r in renewals]
