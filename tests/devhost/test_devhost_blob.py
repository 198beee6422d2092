"""Event Grid-sourced blob triggers through devhost against Azurite (devhost/blob_listener.py).

The function's argument is built by the worker's own converter
(`azure.functions.blob.BlobConverter.decode`) from the blob's bytes and the trigger metadata
the host sends: `BlobTrigger`, `Uri`, `Properties`, `Metadata` and the path's parameters
(Azure/azure-sdk-for-net, Microsoft.Azure.WebJobs.Extensions.Storage.Blobs,
`Triggers/BlobTriggerBinding.cs` `CreateBindingData`; the metadata shapes the Python library's
own tests decode: Azure/azure-functions-python-library `tests/test_blob.py`).
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from typing import Any

import pytest
from azure.functions import meta
from devhost_testkit import Records, StorageHelper, wait_for

from devhost.blob_listener import (
    POISON_QUEUE,
    InvalidBlobTrigger,
    bind_blob,
    host_queue_name,
    split_path,
)

BLOB_APP = "devhost_blob_app"


@pytest.fixture
def blob_settings(base_settings: dict[str, Any]) -> dict[str, Any]:
    container = f"drop-{uuid.uuid4().hex[:8]}"
    return {
        **base_settings,
        "SAMPLE_CONTAINER": container,
        "DEVHOST_EVENT_GRID_POLL_INTERVAL": "0.1",
    }


def upload(storage: StorageHelper, container: str, name: str, data: bytes, **kw: Any) -> str:
    client = storage.blobs.get_container_client(container)
    if not client.exists():
        client.create_container()
    blob = client.get_blob_client(name)
    return str(blob.upload_blob(data, overwrite=True, **kw)["etag"])


def test_a_written_blob_runs_the_function_once_with_the_hosts_binding(
    start_host: Any, blob_settings: dict[str, Any], storage: StorageHelper, records: Records
) -> None:
    container = blob_settings["SAMPLE_CONTAINER"]
    upload(storage, container, "in/before.txt", b"there before the subscription")
    host = start_host(blob_settings, app_module=BLOB_APP, instances=2)
    etag = upload(storage, container, "in/a/b.txt", b"hello", metadata={"origin": "test"})
    upload(storage, container, "out/not-mine.txt", b"outside the path")

    (call,) = wait_for(lambda: records.where(function="sample_blob"))
    host.wait_quiet(quiet=1.0, timeout=30)  # every instance idle: nothing else delivered
    host.stop()
    assert [r["name"] for r in records.all()] == [f"{container}/in/a/b.txt"]
    assert call["type"] == "InputStream" and call["content"] == "hello"
    assert call["length"] == 5 and call["uri"].endswith(f"/{container}/in/a/b.txt")
    assert call["metadata"] == {"origin": "test"}
    assert call["properties"]["ContentLength"] == 5
    assert call["properties"]["ETag"] == {}  # Azure.ETag through Newtonsoft: no version here
    assert etag  # the version the function must read from storage itself
    assert host.totals().successes == {"sample_blob": 1}


def test_with_duplicates_on_every_event_is_delivered_twice(
    start_host: Any, blob_settings: dict[str, Any], storage: StorageHelper, records: Records
) -> None:
    container = blob_settings["SAMPLE_CONTAINER"]
    host = start_host({**blob_settings, "DEVHOST_EVENT_GRID_DUPLICATES": "true"},
                      app_module=BLOB_APP)  # fmt: skip
    upload(storage, container, "in/x.txt", b"v1")
    wait_for(lambda: len(records.where(function="sample_blob")) == 2)
    upload(storage, container, "in/x.txt", b"v2")  # a new version: a new event (twice)
    wait_for(lambda: len(records.where(function="sample_blob", content="v2")) == 2)
    host.wait_quiet(quiet=1.0, timeout=30)
    host.stop()
    assert [r["content"] for r in records.all()] == ["v1", "v1", "v2", "v2"]


def test_a_failing_blob_is_tried_five_times_then_its_message_is_poisoned(
    start_host: Any, blob_settings: dict[str, Any], storage: StorageHelper, records: Records
) -> None:
    container = blob_settings["SAMPLE_CONTAINER"]
    host = start_host(blob_settings, app_module=BLOB_APP)
    upload(storage, container, "in/bad.txt", b"fail always")
    wait_for(lambda: storage.depth(POISON_QUEUE) >= 1)
    host_id = blob_settings["AzureFunctionsWebHost__hostid"]
    wait_for(lambda: storage.depth(host_queue_name(host_id)) == 0)
    host.stop()
    assert len(records.where(function="sample_blob")) == 5  # BlobsOptions.MaxDequeueCount
    poisoned = [json.loads(b) for b in storage.peek_bodies(POISON_QUEUE)]
    mine = [p for p in poisoned if p["ContainerName"] == container]
    assert len(mine) == 1 and mine[0]["BlobName"] == "in/bad.txt"
    assert mine[0]["FunctionId"] == "Host.Functions.sample_blob"
    assert host.totals().failures == {"sample_blob": 5}


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"SAMPLE_BLOB_PATH": "/{name}"}, "Paths must be in the format 'container/blob'"),
        ({"SAMPLE_BLOB_PATH": "{name}/x"}, "Container paths cannot contain"),
        ({"SAMPLE_BLOB_PATH": "Bad_Container/in/a.txt"}, "Invalid container name"),
        ({"SAMPLE_BLOB_PATH": "%NO_SUCH_SETTING%/{name}"}, "NO_SUCH_SETTING"),
        ({"SAMPLE_BLOB_CONNECTION": "NoSuchStorage"}, "NoSuchStorage"),
        ({"SAMPLE_BLOB_SOURCE": "poll"}, "runs only source EventGrid"),
    ],
)
def test_a_trigger_the_host_refuses_puts_the_function_in_error(
    start_host: Any, blob_settings: dict[str, Any], settings: dict[str, str], error: str
) -> None:
    host = start_host({**blob_settings, **settings}, app_module=BLOB_APP)
    (info,) = host.started_instances().values()
    assert error in info["errors"]["sample_blob"]


def test_paths_are_split_as_blob_path_source_create_does() -> None:
    assert split_path("c0/{name}") == ("c0", "{name}")
    assert split_path("imports") == ("imports", "")  # a container alone: every blob in it
    assert split_path("C_0/{name}") == ("C_0", "{name}")  # parameterized: not checked
    for bad in ("c0/", "/x", "c\\0/x", "{c}/x", "c0/x.txt", "C_0/x.txt"):
        with pytest.raises(InvalidBlobTrigger):
            split_path(bad)


def test_the_bound_stream_reads_what_the_converter_was_given() -> None:
    """BlobConverter with Properties in the host's shape: length from ContentLength."""
    metadata = {
        "BlobTrigger": meta.Datum("c/a.txt", "string"),
        "Uri": meta.Datum(json.dumps("http://h/c/a.txt"), "json"),
        "Properties": meta.Datum(json.dumps({"ContentLength": 3, "ETag": {}}), "json"),
        "Metadata": meta.Datum("{}", "json"),
    }
    stream = bind_blob(b"abc", metadata)
    assert (stream.name, stream.length, stream.uri, stream.read()) == (
        "c/a.txt", 3, "http://h/c/a.txt", b"abc")  # fmt: skip


def test_when_the_reporting_instance_dies_another_reports_what_was_written_meanwhile(
    start_host: Any,
    blob_settings: dict[str, Any],
    storage: StorageHelper,
    records: Records,
    tmp_path: Any,
) -> None:
    """The instance polling for Event Grid is SIGKILLed; a blob written while nobody reports
    is delivered by the instance that takes the lease over, once, and the one reported before
    the kill is not reported again (what was reported is kept in storage, not in memory)."""
    container = blob_settings["SAMPLE_CONTAINER"]
    log_file = tmp_path / "instances.log"
    host = start_host(blob_settings, app_module=BLOB_APP, instances=2, log_file=str(log_file))
    upload(storage, container, "in/one.txt", b"before the kill")
    wait_for(lambda: records.where(content="before the kill"))
    key = f"{blob_settings['AzureFunctionsWebHost__hostid']}/sample_blob.EventGrid"
    holder = next(
        int(line.split("instance=devhost-")[1].split()[0])
        for line in log_file.read_text().splitlines()
        if "event=acquire" in line and f"key={key}" in line
    )
    pid = host.pid(holder)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: holder not in host.alive())
    upload(storage, container, "in/two.txt", b"while nobody reports")

    wait_for(lambda: records.where(content="while nobody reports"), timeout=60)
    host.wait_quiet(quiet=1.0, timeout=30)
    host.stop()
    assert len(records.where(content="while nobody reports")) == 1
    assert len(records.where(content="before the kill")) == 1
    assert {r["instance"] for r in records.where(content="while nobody reports")} == {
        f"devhost-{1 - holder}"
    }


def test_a_message_for_a_blob_gone_or_a_function_unknown_ends_unrun(
    start_host: Any, blob_settings: dict[str, Any], storage: StorageHelper, records: Records
) -> None:
    """As `BlobQueueTriggerExecutor`: the blob is read when the message is handled; gone, the
    message ends as a success with nothing run; a FunctionId not registered here likewise."""
    container = blob_settings["SAMPLE_CONTAINER"]
    host = start_host(blob_settings, app_module=BLOB_APP)
    queue = host_queue_name(blob_settings["AzureFunctionsWebHost__hostid"])
    for function, blob in (("Host.Functions.sample_blob", "in/never-written.txt"),
                           ("Host.Functions.elsewhere", "in/x.txt")):  # fmt: skip
        message = {"Type": "BlobTrigger", "FunctionId": function, "BlobType": "BlockBlob",
                   "ContainerName": container, "BlobName": blob, "ETag": '"0x1"'}  # fmt: skip
        storage.queue(queue).send_message(json.dumps(message).encode())
    wait_for(lambda: storage.depth(queue) == 0)
    host.wait_quiet(quiet=0.5, timeout=30)
    host.stop()
    assert records.all() == []
    assert host.totals().successes == {"sample_blob": 2} and not host.totals().failures
