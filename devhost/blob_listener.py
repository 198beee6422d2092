"""Blob triggers with the Event Grid source, delivered as Event Grid and the Functions host do.

On Flex Consumption a blob trigger must say `source=func.BlobSource.EVENT_GRID`. On Azure the
chain is (Azure/azure-sdk-for-net, `sdk/storage/Microsoft.Azure.WebJobs.Extensions.Storage.Blobs`):

1. the storage account's Event Grid subscription posts each `BlobCreated` event to
   `/runtime/webhooks/blobs?functionName=Host.Functions.{name}` on one instance;
2. the blobs extension (`BlobsExtensionConfigProvider.ProcessEventsAsync`) turns it into a
   `BlobTriggerMessage` {Type, FunctionId, BlobType, ContainerName, BlobName, ETag} on the host
   queue `azure-webjobs-blobtrigger-{hostId}` and answers 202; Event Grid itself delivers at
   least once (it retries a failed post for up to 24 hours);
3. every instance's shared blob queue listener (`SharedBlobQueueListenerFactory`) takes the
   messages with the queue semantics: `maxDequeueCount` 5, visible again at once after a
   failure, then copied to `webjobs-blobtrigger-poison`;
4. `BlobQueueTriggerExecutor` reads the blob's properties as it is now: a blob that is gone
   ends the message as a success, unrun; for the Event Grid source the message's ETag is not
   compared, so the function gets the blob as it is when the message is processed (no blob
   receipts either: those belong to the polling source);
5. `BlobTriggerBinding` binds `BlobTrigger` ("container/name"), `Uri`, `Properties`,
   `Metadata` and the path's `{parameters}`; the host sends values that are not strings as
   JSON written by Newtonsoft's defaults (`RpcMessageConversionExtensions.ToRpcDefault`).

devhost plays both sides. `EventGridSource` is Event Grid: Azurite sends no events, so the
instance holding the lease `{hostId}/{function}.EventGrid` polls the container's listing under
the path's fixed prefix (every DEVHOST_EVENT_GRID_POLL_INTERVAL seconds, default 1) and
reports each blob whose (name, ETag) it has not reported; what it reported is kept in
`azure-webjobs-hosts/blobtriggers/{hostId}/{function}/events.json`, written after the
messages, so a new holder neither loses an event nor, but for the last poll of a holder that
died, repeats one. Blobs already there when the subscription is made (the first start) are not
events, as with Event Grid. DEVHOST_EVENT_GRID_DUPLICATES=true delivers every event twice
(Event Grid's at-least-once, for fault runs). `BlobQueueListener` is step 3 to 5, with the
queue listener's code. A path the extension refuses (`BlobPathSource.Create`), a missing
connection setting, or the polling source (Flex Consumption runs only the Event Grid one)
put the function in error at start-up.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import blobsingleton
import blobsingleton.config
from azure.core import MatchConditions
from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.functions import meta
from azure.functions.blob import BlobConverter
from azure.storage.queue import BinaryBase64EncodePolicy

from devhost.host_config import QueueOptions
from devhost.host_retry import HostRetry
from devhost.indexing import BlobTrigger, IndexedFunction
from devhost.invocation import invoke
from devhost.queue_listener import QueueListener
from devhost.request_counting import RequestCounter
from devhost.stats import WorkerStats

log = logging.getLogger("devhost.blob")

EVENT_GRID = "EventGrid"
HOSTS_CONTAINER = "azure-webjobs-hosts"
POISON_QUEUE = "webjobs-blobtrigger-poison"
#: BlobsOptions' defaults: maxDequeueCount 5, maxDegreeOfParallelism 8 per processor.
MAX_DEQUEUE_COUNT = 5
#: Event Grid has no instance to lose; a holder that dies leaves the reporting to another
#: instance within this lease (a blob lease's shortest, 15 s).
LISTENER_LEASE_PERIOD = 15.0
LISTENER_RECOVERY_INTERVAL = 2.0
POLL_SETTING = "DEVHOST_EVENT_GRID_POLL_INTERVAL"
DUPLICATES_SETTING = "DEVHOST_EVENT_GRID_DUPLICATES"
_CONTAINER = re.compile(r"^\$root$|^[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){1,61}[a-z0-9]$")
_PARAMETER = re.compile(r"\{([^{}]+)\}")


class InvalidBlobTrigger(ValueError):
    """A blob trigger the host would not start (the function is put in error)."""


def host_queue_name(host_id: str) -> str:
    """The host's blob trigger queue (`HostQueueNames.GetHostBlobTriggerQueueName`)."""
    return f"azure-webjobs-blobtrigger-{host_id}".lower()


def function_id(name: str) -> str:
    """The function id an event's message names (the webhook's `functionName`)."""
    return f"Host.Functions.{name}"


def split_path(path: str) -> tuple[str, str]:
    """(container, blob name pattern) as `BlobPathSource.Create` reads a resolved path, with
    its errors: a path must be "container" or "container/blob"; a container holds no
    `{parameter}` and no backslash; the container's name is checked only in a path without
    parameters (the extension's `ParameterizedBlobPathSource` takes it unchecked)."""
    slash = path.find("/")
    container, pattern = (path, "") if slash == -1 else (path[:slash], path[slash + 1 :])
    if (slash != -1 and not (0 < slash < len(path) - 1)) or "\\" in container:
        raise InvalidBlobTrigger(
            f"Invalid blob trigger path '{path}'. Paths must be in the format 'container/blob'."
        )
    if "{" in container:
        raise InvalidBlobTrigger(
            f"Invalid blob trigger path '{path}'. Container paths cannot contain {{resolve}} "
            "tokens."
        )
    if not _PARAMETER.search(path) and not _CONTAINER.match(container):
        raise InvalidBlobTrigger(f"Invalid blob trigger path '{path}'. Invalid container name.")
    return container, pattern


def pattern_matcher(pattern: str) -> Callable[[str], dict[str, str] | None]:
    """The path's `{parameters}` from a blob name (None when the name does not fit)."""
    parts = _PARAMETER.split(pattern)
    regex = "".join(
        re.escape(part) if i % 2 == 0 else f"(?P<p{i // 2}>.+?)" for i, part in enumerate(parts)
    )
    names = parts[1::2]
    compiled = re.compile(f"^{regex}$" if pattern else "^.+$", re.DOTALL)

    def match(blob_name: str) -> dict[str, str] | None:
        found = compiled.match(blob_name)
        if found is None:
            return None
        return {name: found.group(f"p{i}") for i, name in enumerate(names)}

    return match


def check_trigger(function: IndexedFunction) -> tuple[str, str]:
    """(container, pattern) of a blob-triggered function devhost can run; InvalidBlobTrigger,
    SettingMissing otherwise (the instance puts the function in error)."""
    trigger = function.trigger
    assert isinstance(trigger, BlobTrigger)
    if trigger.source != EVENT_GRID:
        raise InvalidBlobTrigger(
            f"blob trigger source {trigger.source!r}: Flex Consumption runs only source "
            "EventGrid (func.BlobSource.EVENT_GRID), and so does devhost"
        )
    container, pattern = split_path(trigger.resolved_path())
    blobsingleton.config.from_settings(trigger.connection)  # SettingMissing names it
    return container, pattern


def _json(value: Any) -> meta.Datum:
    return meta.Datum(type="json", value=json.dumps(value))


def _time(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def host_properties(props: Any) -> dict[str, Any]:
    """`Properties` as the host sends it: Azure.Storage.Blobs' `BlobProperties` written by
    Newtonsoft's defaults. Its `ETag` is `Azure.ETag`, a struct with no public member, which
    Newtonsoft writes as `{}`: a Python function cannot read the version from here (read the
    blob's properties); `ContentLength` is what `InputStream.length` reads."""
    settings = props.content_settings
    md5 = settings.content_md5
    return {
        "LastModified": _time(props.last_modified),
        "CreatedOn": _time(props.creation_time),
        "Metadata": dict(props.metadata or {}),
        "BlobType": 0,  # BlobType.Block (the enum's value)
        "LeaseDuration": 0,
        "LeaseState": 0,
        "LeaseStatus": 1,
        "ContentLength": int(props.size or 0),
        "ContentType": settings.content_type,
        "ETag": {},
        "ContentHash": base64.b64encode(bytes(md5)).decode() if md5 else None,
        "ContentEncoding": settings.content_encoding,
        "ContentDisposition": settings.content_disposition,
        "ContentLanguage": settings.content_language,
        "CacheControl": settings.cache_control,
        "AccessTier": str(props.blob_tier) if props.blob_tier else None,
        "VersionId": props.version_id,
    }


def host_trigger_metadata(
    container: str, blob_name: str, url: str, props: Any, parameters: dict[str, str]
) -> dict[str, meta.Datum]:
    """The trigger metadata the host sends with a blob trigger (`BlobTriggerBinding`):
    built-in binding data, then the path's parameters, which win a clash (as the host's)."""
    metadata: dict[str, meta.Datum] = {
        "BlobTrigger": meta.Datum(type="string", value=f"{container}/{blob_name}"),
        "Uri": _json(url),
        "Properties": _json(host_properties(props)),
        "Metadata": _json(dict(props.metadata or {})),
    }
    by_lower = {name.lower(): name for name in metadata}
    for name, value in parameters.items():
        metadata[by_lower.get(name.lower(), name)] = meta.Datum(type="string", value=value)
    return metadata


def bind_blob(content: bytes, metadata: dict[str, meta.Datum]) -> Any:
    """`func.InputStream` as the worker decodes it (the blob's bytes, the host's metadata)."""
    return BlobConverter.decode(meta.Datum(type="bytes", value=content), trigger_metadata=metadata)


def _true(name: str) -> bool:
    return (os.environ.get(name) or "").strip().lower() in ("1", "true", "yes")


class EventGridSource:
    """Event Grid's side for one function: reports each new blob version under its path as a
    message on the host's blob trigger queue, at least once (see the module docstring)."""

    def __init__(self, function: IndexedFunction, host_counter: RequestCounter) -> None:
        self.function = function
        self.container, pattern = check_trigger(function)
        self.prefix = pattern.split("{", 1)[0]
        self.match = pattern_matcher(pattern)
        trigger = function.trigger
        assert isinstance(trigger, BlobTrigger)
        options = {"raw_request_hook": host_counter, "retry_policy": HostRetry()}
        data = blobsingleton.config.from_settings(trigger.connection).with_options(**options)
        host = blobsingleton.config.from_settings("AzureWebJobsStorage").with_options(**options)
        host_id = blobsingleton.config.host_id()
        self._data = data.blob_service().get_container_client(self.container)
        self._hosts = host.blob_service().get_container_client(HOSTS_CONTAINER)
        self._state = self._hosts.get_blob_client(
            f"blobtriggers/{host_id}/{function.name}/events.json"
        )
        self._queue = host.queue_service().get_queue_client(
            host_queue_name(host_id), message_encode_policy=BinaryBase64EncodePolicy()
        )
        self.lease_key = f"{host_id}/{function.name}.EventGrid"
        self.poll_interval = float(os.environ.get(POLL_SETTING) or 1.0)
        self.duplicates = _true(DUPLICATES_SETTING)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._main, name=f"eventgrid-{function.name}", daemon=True
        )

    # lifecycle

    def start(self) -> None:
        """Make the subscription (once per host id: what is there now is no event), then
        report from the thread of whichever instance holds the lease."""
        try:
            self._subscribe()
        except Exception as error:  # storage not answering yet: the thread tries again
            log.warning("%s: Event Grid subscription not made yet: %r", self.function.name, error)
        log.info(
            "%s: blob trigger on %s/%s (Event Grid source: listing polled every %.1fs%s)",
            self.function.name,
            self.container,
            self.prefix + "...",
            self.poll_interval,
            ", every event delivered twice" if self.duplicates else "",
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def drain(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # Event Grid

    def _subscribe(self) -> None:
        """The host queue, and the subscription's start: the blobs there now are no events."""
        with contextlib.suppress(ResourceExistsError):
            self._hosts.create_container()
        with contextlib.suppress(ResourceExistsError):
            self._queue.create_queue()
        if not self._state.exists():
            with contextlib.suppress(ResourceExistsError):
                self._state.upload_blob(json.dumps(self._listing()).encode(), overwrite=False)

    def _listing(self) -> dict[str, str]:
        """{blob name: ETag} of the blobs the subscription reports (none without a container)."""
        try:
            blobs = list(self._data.list_blobs(name_starts_with=self.prefix or None))
        except ResourceNotFoundError:
            return {}
        return {b.name: str(b.etag) for b in blobs if self.match(b.name) is not None}

    def _main(self) -> None:
        from blobsingleton import BlobLease
        from blobsingleton.errors import LeaseError

        while not self._stop.is_set():
            lease = BlobLease(self.lease_key, period=LISTENER_LEASE_PERIOD, container=self._hosts)
            try:
                lease.acquire(blocking=False)
            except LeaseError:
                pass
            except Exception as error:
                log.warning("%s: Event Grid lease attempt failed: %r", self.function.name, error)
            if not lease.is_held:
                self._stop.wait(LISTENER_RECOVERY_INTERVAL)
                continue
            try:
                self._report_while(partial(self._holding, lease))
            except Exception:
                log.exception("%s: Event Grid source error; starting again", self.function.name)
                self._stop.wait(LISTENER_RECOVERY_INTERVAL)
            finally:
                with contextlib.suppress(Exception):
                    lease.release()

    def _holding(self, lease: Any) -> bool:
        return not self._stop.is_set() and bool(lease.is_held)

    def _report_while(self, holding: Callable[[], bool]) -> None:
        self._subscribe()
        download = self._state.download_blob()
        reported: dict[str, str] = json.loads(download.readall())
        etag = download.properties.etag
        while holding():
            listing = self._listing()
            events = [(name, tag) for name, tag in sorted(listing.items())
                      if reported.get(name) != tag]  # fmt: skip
            for name, tag in events:
                self._deliver(name, tag)
            if listing != reported:
                try:
                    etag = self._state.upload_blob(
                        json.dumps(listing).encode(),
                        overwrite=True,
                        etag=etag,
                        match_condition=MatchConditions.IfNotModified,
                    )["etag"]
                except ResourceModifiedError:
                    return  # another holder reported meanwhile: read its state again
                reported = listing
            self._stop.wait(self.poll_interval)

    def _deliver(self, blob_name: str, etag: str) -> None:
        """What the webhook does with one event: a BlobTriggerMessage on the host queue (the
        event's `eTag`, quoted as the extension quotes it; the SDK's already is)."""
        message = json.dumps({
            "Type": "BlobTrigger",
            "FunctionId": function_id(self.function.name),
            "BlobType": "BlockBlob",
            "ContainerName": self.container,
            "BlobName": blob_name,
            "ETag": etag,
        })  # fmt: skip
        for _ in range(2 if self.duplicates else 1):
            self._queue.send_message(message.encode("utf-8"))
        log.info(
            "%s: blob event delivered%s (ETag %s)",
            self.function.name,
            " twice" if self.duplicates else "",
            etag,
        )


class BlobQueueListener(QueueListener):
    """The host's shared blob queue listener: one per instance for every Event Grid-sourced
    blob function; each message runs the function it names with the blob as it is now."""

    def __init__(
        self,
        functions: list[IndexedFunction],
        options: QueueOptions,
        host_counter: RequestCounter,
        stats: WorkerStats,
    ) -> None:
        host_id = blobsingleton.config.host_id()
        blob_options = QueueOptions(
            batch_size=options.batch_size,
            new_batch_threshold=options.new_batch_threshold,
            max_polling_interval=options.max_polling_interval,
            visibility_timeout=0.0,
            max_dequeue_count=MAX_DEQUEUE_COUNT,
            message_encoding="base64",
        )
        queue = (host_queue_name(host_id), POISON_QUEUE, "AzureWebJobsStorage")
        super().__init__(functions[0], blob_options, host_counter, stats, queue=queue)
        self._functions: dict[str, IndexedFunction] = {}
        self._containers: dict[str, Any] = {}
        for function in functions:
            trigger = function.trigger
            assert isinstance(trigger, BlobTrigger)
            container, pattern = check_trigger(function)
            account = blobsingleton.config.from_settings(trigger.connection)
            service = account.with_options(
                raw_request_hook=host_counter, retry_policy=HostRetry()
            ).blob_service()  # the host's reads of the blob, counted as the host's
            for key in (function_id(function.name), function.name):
                self._functions[key] = function
            self._containers[function.name] = (service, container, pattern_matcher(pattern))

    @staticmethod
    def _message(body: bytes) -> dict[str, Any]:
        parsed = json.loads(body)
        if not isinstance(parsed, dict) or not parsed.get("FunctionId"):
            raise ValueError("Invalid blob trigger message.")
        return parsed

    def _function_name(self, body: bytes) -> str:
        with contextlib.suppress(ValueError):
            found = self._functions.get(str(self._message(body).get("FunctionId")))
            if found is not None:
                return found.name
        return self.function.name

    def _invoke_message(self, message: Any, body: bytes) -> None:
        event = self._message(body)  # not a message: fails, as the host's executor does
        function = self._functions.get(str(event["FunctionId"]))
        if function is None:
            log.warning("blob trigger message %s names no function here: ignored", message.id)
            return
        service, _, match = self._containers[function.name]
        container = str(event.get("ContainerName") or "")
        blob_name = str(event.get("BlobName") or "")
        blob = service.get_container_client(container).get_blob_client(blob_name)
        try:
            props = blob.get_blob_properties()
            content = blob.download_blob(
                etag=props.etag, match_condition=MatchConditions.IfNotModified
            ).readall()
        except ResourceNotFoundError:
            log.info("%s: blob of message %s is gone: not run (as the host)", function.name,
                     message.id)  # fmt: skip
            return
        except HttpResponseError as error:
            if error.status_code != 412:
                raise
            raise RuntimeError("the blob changed while it was read; retried") from None
        metadata = host_trigger_metadata(container, blob_name, blob.url, props,
                                         match(blob_name) or {})  # fmt: skip
        invoke(
            function.user_function,
            {function.arg_name: bind_blob(bytes(content), metadata)},
            function_name=function.name,
        )
