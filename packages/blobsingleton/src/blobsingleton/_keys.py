"""Keys: resolved from a template and an invocation (like WebJobs' `[Singleton("{Region}")]`),
validated and made safe blob names in a namespace, by default the host id (docs/internals.md)."""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import logging
import os
import re
import socket
import sys
import unicodedata
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from enum import Enum
from typing import Any, Literal, Protocol, runtime_checkable

from blobsingleton import schedules
from blobsingleton._backends import backends_now
from blobsingleton._connection import resolve_placeholders, setting
from blobsingleton._queues import QueueMessageLike
from blobsingleton.errors import InvalidKey, KeyTemplateError, SettingMissing

#: Whose keys: a function's own, or the app's (WebJobs' SingletonScope.Function / Host).
Scope = Literal["function", "app"]
FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\}")


@runtime_checkable
class HttpRequestLike(Protocol):
    """What key templates read of `azure.functions.HttpRequest`."""

    @property
    def route_params(self) -> Mapping[str, str]: ...

    @property
    def params(self) -> Mapping[str, str]: ...


@runtime_checkable
class TimerRequestLike(Protocol):
    """What key templates read of `azure.functions.TimerRequest`."""

    @property
    def past_due(self) -> bool: ...

    @property
    def schedule_status(self) -> Mapping[str, Any] | None: ...


Getter = Callable[[Any], Any]


@dataclass(frozen=True)
class TriggerKind:
    """What a key template reads of one kind of trigger argument (docs: the library README)."""

    #: What it is, as an error names it: "Service Bus message".
    name: str
    #: The host's binding type: "serviceBusTrigger".
    binding: str
    #: Identity names (the host's binding-data name and the Python property) and their values.
    names: Mapping[str, Getter]
    #: The mappings a `{field}` is looked up in, in order (none: its content is never read).
    body: Callable[[Any], list[Mapping[str, Any]]]
    #: What `body` is, for errors: "JSON body".
    body_label: str
    #: Names unique only within a scope (an Event Hubs sequence number: its partition), however
    #: spelled: an identity name, the last part of a path through the argument
    #: (`{event.sequence_number}`, `{event.metadata.SequenceNumber}`) or, where the body is the
    #: item itself (`system_body`: a Cosmos DB document), a body field. Refused unless one of
    #: `completes` (the scope) is in the key too; `partial_reason` says what to add.
    partial: frozenset[str] = frozenset()
    completes: frozenset[str] = frozenset()
    partial_reason: str = ""
    system_body: bool = False
    #: What it offers instead of a body, for errors.
    instead: str = ""

    def describe(self, bodies: list[Mapping[str, Any]]) -> str:
        """The trigger and what it offers a key, for an error (field names, never values)."""
        names = ", ".join(f"{{{n}}}" for n in self.names) or "none"
        fields = sorted({f for source in bodies for f in source if FIELD.fullmatch(f"{{{f}}}")})
        shown = ", ".join(fields[:_SHOWN]) + (
            f" and {len(fields) - _SHOWN} more" if len(fields) > _SHOWN else ""
        )
        if not self.body_label:
            offered = self.instead
        elif fields:
            offered = f"{self.body_label} fields {shown}"
        else:
            offered = f"no {self.body_label} fields (not a JSON object, or empty)"
        return f"a {self.name} ({self.binding}): {offered}; identity names {names}"


_SHOWN = 10


def _attribute(name: str) -> Getter:
    return lambda value: getattr(value, name, None)


def _aliases(**pairs: str) -> dict[str, Getter]:
    """Each binding-data name and its Python property, both reading the property."""
    names: dict[str, Getter] = {}
    for binding_name, prop in pairs.items():
        names[binding_name] = names[prop] = _attribute(prop)
    return names


def _json_body(value: Any) -> list[Mapping[str, Any]]:
    body = _json_object(value.get_body())
    return [] if body is None else [body]


def _event_data(value: Any) -> list[Mapping[str, Any]]:
    data = value.get_json()
    return [data] if isinstance(data, Mapping) else []


def _partition_id(event: Any) -> Any:
    context = (getattr(event, "metadata", None) or {}).get("PartitionContext")
    return context.get("PartitionId") if isinstance(context, Mapping) else None


def _blob_etag(blob: Any) -> Any:
    """`Properties.ETag` when the host sent it as text. The blob extension of today's bundles
    (Azure.Storage.Blobs) sends `Azure.ETag` serialised as `{}`: no version there (None)."""
    properties = getattr(blob, "blob_properties", None)
    etag = properties.get("ETag") if isinstance(properties, Mapping) else None
    return etag if isinstance(etag, str) and etag.strip() else None


def _http_sources(request: Any) -> list[Mapping[str, Any]]:
    """Route, then query parameters, then the JSON body (parsed only if a field gets there)."""
    return [request.route_params, request.params, _LazyJsonBody(request)]


class _LazyJsonBody(Mapping[str, Any]):
    """An HTTP request's JSON object body, parsed at the first look (empty if none)."""

    def __init__(self, request: Any) -> None:
        self._request = request
        self._fields: Mapping[str, Any] | None = None

    def _load(self) -> Mapping[str, Any]:
        if self._fields is None:
            get_body = getattr(self._request, "get_body", None)
            body = _json_object(get_body()) if callable(get_body) else None
            self._fields = body or {}
        return self._fields

    def __getitem__(self, field: str) -> Any:
        return self._load()[field]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())


def _document_field(field: str) -> Getter:
    return lambda document: document.get(field)


QUEUE = TriggerKind(
    "Storage queue message", "queueTrigger",
    {"Id": _attribute("id"), "DequeueCount": _attribute("dequeue_count"),
     "dequeue_count": _attribute("dequeue_count")},
    _json_body, "JSON body",
)  # fmt: skip
SERVICE_BUS = TriggerKind(
    "Service Bus message", "serviceBusTrigger",
    _aliases(MessageId="message_id", DeliveryCount="delivery_count", SessionId="session_id",
             SequenceNumber="sequence_number", CorrelationId="correlation_id"),
    _json_body, "JSON body",
)  # fmt: skip
EVENT_HUBS = TriggerKind(
    "Event Hubs event", "eventHubTrigger",
    {**_aliases(SequenceNumber="sequence_number", Offset="offset", PartitionKey="partition_key"),
     "PartitionId": _partition_id, "partition_id": _partition_id},
    _json_body, "JSON body",
    partial=frozenset({"SequenceNumber", "sequence_number", "Offset", "offset"}),
    completes=frozenset({"PartitionId", "partition_id"}),
    partial_reason=(
        "identifies an Event Hubs event only within its partition (another partition has the "
        "same numbers): add {PartitionId} (or {ARG.metadata.PartitionContext.PartitionId}) to "
        "the key, as in 'ingest-{PartitionId}-{SequenceNumber}'"
    ),
)  # fmt: skip
EVENT_GRID = TriggerKind(
    "Event Grid event", "eventGridTrigger",
    _aliases(Id="id", Subject="subject", EventType="event_type", Topic="topic"),
    _event_data, "data",
)  # fmt: skip
CLOUD_EVENT = TriggerKind(
    "Event Grid CloudEvent", "eventGridTrigger",
    _aliases(Id="id", Subject="subject", Type="type", Source="source"),
    _event_data, "data",
)  # fmt: skip
COSMOS_DOCUMENT = TriggerKind(
    "Cosmos DB document", "cosmosDBTrigger",
    {"Id": _document_field("id"), "Lsn": _document_field("_lsn"),
     "ETag": _document_field("_etag")},
    lambda document: [document], "document",
    partial=frozenset({"Lsn", "_lsn"}),
    completes=frozenset({"Id", "id"}),
    partial_reason=(
        "is a change's number within its partition key range (documents of other ranges have "
        "the same numbers): add the document's {id} to the key, as in 'sync-{id}-{_lsn}'"
    ),
    system_body=True,
)  # fmt: skip
BLOB = TriggerKind(
    "blob", "blobTrigger",
    {"BlobTrigger": _attribute("name"), "name": _attribute("name"), "Uri": _attribute("uri"),
     "uri": _attribute("uri"), "ETag": _blob_etag, "etag": _blob_etag},
    lambda blob: [], "", instead="its content is never read for a key",
)  # fmt: skip
HTTP = TriggerKind(
    "HTTP request", "httpTrigger", {}, _http_sources, "route, query or JSON body"
)  # fmt: skip
TIMER = TriggerKind(
    "timer", "timerTrigger", {}, lambda timer: [], "",
    instead="{occurrence}, with the decorator's schedule=",
)  # fmt: skip

#: Every kind of trigger argument a key template reads, by the azure.functions class it is.
TRIGGERS: dict[str, TriggerKind] = {
    "ServiceBusMessage": SERVICE_BUS, "EventHubEvent": EVENT_HUBS,
    "EventGridEvent": EVENT_GRID, "CloudEvent": CLOUD_EVENT, "Document": COSMOS_DOCUMENT,
    "InputStream": BLOB, "HttpRequest": HTTP, "QueueMessage": QUEUE, "TimerRequest": TIMER,
}  # fmt: skip


def trigger_of(value: Any) -> TriggerKind | None:
    """The trigger kind of an argument: by its azure.functions class, else by its shape (an
    HTTP request, a queue message, a timer, as the library's protocols read them)."""
    if isinstance(value, (str, bytes, int, float, list, tuple)) or value is None:
        return None
    kind = trigger_kind_of_class(type(value))
    if kind is not None:
        return kind
    # (one attribute looked up first: a protocol's isinstance costs ten times as much, and
    # most arguments are none of the three)
    if hasattr(value, "route_params") and isinstance(value, HttpRequestLike):
        return HTTP
    if hasattr(value, "dequeue_count") and isinstance(value, QueueMessageLike):
        return QUEUE
    if hasattr(value, "past_due") and isinstance(value, TimerRequestLike):
        return TIMER
    return None


def first_item(value: Any) -> Any:
    """The first item of a batch argument (a list, a `func.DocumentList`), else None."""
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and len(value):
        return value[0]
    return None


_KINDS: dict[type, TriggerKind | None] = {}


def trigger_kind_of_class(cls: type) -> TriggerKind | None:
    if cls not in _KINDS:
        _KINDS[cls] = next(
            (
                TRIGGERS[base.__name__]
                for base in cls.__mro__
                if base.__module__.startswith("azure.functions") and base.__name__ in TRIGGERS
            ),
            None,
        )
    return _KINDS[cls]


def resolve_key(
    template: str,
    signature: inspect.Signature,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    schedule: str | None = None,
) -> str:
    """The key `template` names for one invocation of a function with `signature`.

    A `{field}` is, first match wins: an argument (`{account}`, or a path through it,
    `{msg.message_id}`); a field of a trigger argument's body (`TriggerKind.body`: a JSON
    body's top-level field, an Event Grid event's `data`, a Cosmos DB document; an HTTP
    request's route, then query parameters, then JSON body); one of a trigger argument's
    identity names (`TriggerKind.names`: the host's binding-data name, `{MessageId}`, or the
    Python property, `{message_id}`); a timer's `{occurrence}`. A body field overrides an
    identity name of the same spelling, as in WebJobs' binding data; a path through the
    argument always reaches the property."""
    bound = signature.bind_partial(*args, **kwargs).arguments
    text = resolve_placeholders(template)
    call = _Call(template, bound, schedule)
    key = FIELD.sub(lambda m: call.lookup(m.group(1)), text)
    call.check()
    return key


class _Call:
    """One invocation's arguments as a key template reads them (bodies parsed once)."""

    def __init__(self, template: str, bound: Mapping[str, Any], schedule: str | None) -> None:
        self.template, self.bound, self.schedule = template, bound, schedule
        self.triggers = [
            (name, value, kind)
            for name, value in bound.items()
            if (kind := trigger_of(value)) is not None
        ]
        self._bodies: dict[str, list[Mapping[str, Any]]] = {}
        #: Per trigger argument, the identity names its key reads, each with its spelling.
        self._used: dict[str, dict[str, str]] = {}

    def bodies(self, name: str, value: Any, kind: TriggerKind) -> list[Mapping[str, Any]]:
        if name not in self._bodies:
            self._bodies[name] = kind.body(value)
        return self._bodies[name]

    def lookup(self, field: str) -> str:
        template = self.template
        head, *path = field.split(".")
        if head in self.bound:
            batch = _batch_of(head, self.bound[head])
            if batch is not None:
                raise KeyTemplateError(template, field, f"cannot be read: {batch}")
            if path and any(name == head for name, _, _ in self.triggers):
                self._use(head, path[-1], field)  # a path through a trigger argument
            return _follow(template, field, self.bound[head], path)
        for name, value, kind in self.triggers:
            for source in self.bodies(name, value, kind):
                if head in source:
                    if kind.system_body:
                        self._use(name, (path or [head])[-1], field)
                    return _follow(template, field, source[head], path)
        for name, value, kind in self.triggers:
            if head in kind.names:
                self._use(name, (path or [head])[-1], field)
                return _follow(template, field, kind.names[head](value), path)
            if head == "occurrence" and not path and kind is TIMER:
                return _occurrence(template, value, self.schedule)
        raise KeyTemplateError(template, field, self._not_found())

    def _use(self, argument: str, name: str, field: str) -> None:
        """Note that the key reads `name` of trigger argument `argument` (spelt `field`)."""
        self._used.setdefault(argument, {})[name] = field

    def check(self) -> None:
        """Refuse a key made of names that identify an item only within a scope (a partition)
        without that scope, however each is spelt (`partial_identity`)."""
        for name, _, kind in self.triggers:
            used = self._used.get(name, {})
            refused = partial_identity(kind, used, name)
            if refused is not None:
                raise KeyTemplateError(self.template, *refused)

    def _not_found(self) -> str:
        """What the invocation offers instead: its arguments, per trigger argument its body
        and identity names, and why a list has none."""
        offers = [f"arguments: {', '.join(self.bound) or 'none'}"]
        for name, value, kind in self.triggers:
            offers.append(f"{name} is {kind.describe(self.bodies(name, value, kind))}")
        offers += filter(None, (_batch_of(name, value) for name, value in self.bound.items()))
        return (
            "is not an argument, a body field or an identity name of this invocation ("
            + "; ".join(offers)
            + ")"
        )


def _batch_of(name: str, value: Any) -> str | None:
    """Why argument `name` has no key when it is a batch of trigger items (a list, a
    `func.DocumentList`), naming `fn.each`; else None."""
    item = trigger_of(first_item(value))
    if item is None:
        return None
    return (
        f"{name} is a list of {len(value)} {item.name}s (a batch, cardinality many): a key "
        f"template names one item: call fn.each({name}) to run each item once (README, "
        "'Batches')"
    )


def partial_identity(
    kind: TriggerKind, used: Mapping[str, str], argument: str
) -> tuple[str, str] | None:
    """The field and reason to refuse a key reading `used` of a `kind` argument named
    `argument` (each name read, with the field that spelt it): a name unique only within a
    scope with no name of the scope beside it. None when the key is whole."""
    partial = sorted(field for name, field in used.items() if name in kind.partial)
    if not partial or any(name in kind.completes for name in used):
        return None
    return partial[0], kind.partial_reason.replace("ARG", argument)


#: Values a key may be made of. Anything else (a list, a dict, an object) has no one spelling.
_SCALARS = (str, int, float, Decimal, uuid.UUID, date)


def _follow(template: str, field: str, value: Any, path: list[str]) -> str:
    for part in path:
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif hasattr(value, part):
            value = getattr(value, part)
        else:
            raise KeyTemplateError(template, field, f"has no {part!r}")
    if isinstance(value, Enum):
        value = value.value
    if value is None:
        raise KeyTemplateError(template, field, "is missing (null)")
    if isinstance(value, bool) or not isinstance(value, _SCALARS):
        kind = type(value).__name__
        raise KeyTemplateError(template, field, f"is a {kind}, not a string or a number")
    text = str(value)
    if not text.strip():
        raise KeyTemplateError(template, field, "is empty or blank")
    return text


def function_scope(fn: Callable[..., Any]) -> str:
    """A function's own scope: its module and qualified name as a blob name segment."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{fn.__module__}.{fn.__qualname__}")


def _json_object(body: bytes | str) -> dict[str, Any] | None:
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None


def _occurrence(
    template: str, timer: TimerRequestLike, schedule: str | None, now: datetime | None = None
) -> str:
    """The schedule occurrence this timer invocation stands for (ISO UTC), the same on every
    instance (`schedules.fired_occurrence`)."""
    if schedule is None:
        raise KeyTemplateError(template, "occurrence", "needs the timer's schedule= argument")
    try:
        text = resolve_placeholders(schedule)
        moment = schedules.fired_occurrence(text, timer.schedule_status, now or backends_now())
    except (SettingMissing, schedules.InvalidSchedule, schedules.NoOccurrence) as error:
        raise KeyTemplateError(template, "occurrence", str(error)) from None
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


MAX_KEY_LENGTH = 256
#: Azure's limit on a blob name (characters, after percent-encoding here).
MAX_BLOB_NAME = 1024
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def validate_key(key: object, *, max_length: int = MAX_KEY_LENGTH) -> str:
    """`key` in Unicode normal form C, if it is usable as a lease or record key (so "é" typed
    as one code point or as "e" and a combining accent is one key); `InvalidKey` otherwise."""
    if not isinstance(key, str):
        raise InvalidKey(key, f"must be a string, not {type(key).__name__}")
    key = unicodedata.normalize("NFC", key)
    if not key.strip():
        raise InvalidKey(key, "must not be empty")
    if len(key) > max_length:
        raise InvalidKey(key, f"is {len(key)} characters long, the limit is {max_length}")
    if not (key.isascii() and key.isprintable()) and any(
        unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") for ch in key
    ):
        raise InvalidKey(key, "contains control characters or lone surrogates")
    segments = key.replace("\\", "/").split("/")
    if key.startswith(("/", "\\")) or any(s in (".", "..") for s in segments):
        raise InvalidKey(key, "contains a path segment ('/', '.' or '..') that escapes its prefix")
    return key


def encode_key(key: str) -> str:
    """Percent-encode every character outside [A-Za-z0-9_-] (UTF-8 bytes, upper-case hex)."""
    return "".join(
        ch if ch in _SAFE else "".join(f"%{b:02X}" for b in ch.encode("utf-8")) for ch in key
    )


@functools.lru_cache(maxsize=4096)
def blob_name(prefix: str, key: str) -> str:
    """The blob name for `key` under `prefix`, after validating the key; `InvalidKey` when it
    would pass Azure's 1,024-character limit (many non-ASCII characters encode long)."""
    encoded = encode_key(validate_key(key))
    name = f"{prefix}/{encoded}" if prefix else encoded
    if len(name) > MAX_BLOB_NAME:
        raise InvalidKey(
            key,
            f"names a blob of {len(name)} characters once encoded; Azure allows {MAX_BLOB_NAME}",
        )
    return name


def prefix(namespace: str, scope: str | None) -> str:
    """Where a namespace's keys are named: `{namespace}` for the app's, `{namespace}/@{scope}`
    for one function's own ('@' is never in an encoded key, so the two cannot meet)."""
    return namespace if scope is None else f"{namespace}/@{scope}"


#: The host's limit on a host id's length (ScriptConstants.MaximumHostIdLength).
MAX_HOST_ID_LENGTH = 32
_NAMESPACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")


def host_id(settings: Mapping[str, str | None] | None = None) -> str:
    """This app's Functions host id, derived as the host derives it from app `settings`
    (default: the environment; a local host passes an instance's settings)."""
    return _host_id(os.environ if settings is None else settings)[0]


def _host_id(values: Mapping[str, str | None]) -> tuple[str, bool]:
    """The host id, and whether it is the local fallback (this machine's name and a hash of
    the app folder, `app_root`): the host's ScriptHostIdProvider.GetDefaultHostId and its
    `IsLocal`."""

    def get(name: str) -> str:
        return values.get(name) or ""

    explicit = get("AzureFunctionsWebHost__hostid") or get("AzureFunctionsWebHost:hostid")
    if explicit:
        return explicit, False
    slot_name = get("WEBSITE_SITE_NAME")
    slot = get("WEBSITE_SLOT_NAME")
    if slot_name and slot and slot.lower() != "production":
        slot_name += f"-{slot}"
    slot_name = slot_name.lower()
    flex = get("WEBSITE_SKU").lower() == "flexconsumption" or bool(
        get("CONTAINER_NAME") and get("LEGION_SERVICE_HOST")
    )
    # The host's IsAnyKubernetesEnvironment: Container Apps (MANAGED_ENVIRONMENT), or
    # Kubernetes-managed hosting (a pod given its namespace). A plain KEDA pod is neither.
    kubernetes = bool(
        get("MANAGED_ENVIRONMENT") or (get("KUBERNETES_SERVICE_HOST") and get("POD_NAMESPACE"))
    )
    local = False
    if flex:  # Flex Consumption: the host hashes the name (MD5 read as a .NET Guid, no dashes)
        name_hash = hashlib.md5(slot_name.encode(), usedforsecurity=False).digest()
        name = uuid.UUID(bytes_le=name_hash).hex if slot_name else ""
    elif get("WEBSITE_INSTANCE_ID") or kubernetes:
        name = slot_name
    elif get("CONTAINER_NAME") and get("WEBSITE_HOSTNAME"):
        # Linux Consumption (a non-Azure container, without WEBSITE_HOSTNAME, counts as local).
        name = get("WEBSITE_HOSTNAME").replace(".azurewebsites.net", "")
    else:
        machine = "".join(ch for ch in socket.gethostname() if ch.isalnum())
        root, _ = app_root(values)
        digest = int(hashlib.sha256(root.encode()).hexdigest()[:8], 16)
        name, local = f"{machine}-{digest}", True
    if not name:
        raise SettingMissing(
            "AzureFunctionsWebHost__hostid",
            "no host id can be derived here (no site name): set AzureFunctionsWebHost__hostid or "
            "BLOBSINGLETON_NAMESPACE",
        )
    return name[:MAX_HOST_ID_LENGTH].lower().rstrip("-"), local


#: What marks a Functions app's folder (its script root).
_APP_FILES = ("function_app.py", "host.json")


def app_root(values: Mapping[str, str | None] | None = None) -> tuple[str, str]:
    """The folder of this app, the same however and from wherever its process starts, and how
    it was found: setting AzureWebJobsScriptRoot (the host sets it); else the folder of the
    imported `function_app` module; else the first folder holding function_app.py or host.json
    at or above the main script's folder, then the working directory's; else the working
    directory."""
    values = os.environ if values is None else values
    explicit = values.get("AzureWebJobsScriptRoot")
    if explicit:
        return os.path.realpath(explicit), "setting AzureWebJobsScriptRoot"
    module = sys.modules.get("function_app")
    path = getattr(module, "__file__", None)
    if path:
        return os.path.dirname(os.path.realpath(path)), "the folder of the function_app module"
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    for start, what in ((main and os.path.dirname(main), "the main script"),
                        (os.getcwd(), "the working directory")):  # fmt: skip
        folder = _app_folder_above(start) if start else None
        if folder is not None:
            marker = next(n for n in _APP_FILES if os.path.exists(os.path.join(folder, n)))
            return folder, f"the folder holding {marker}, at or above {what}"
    return os.path.realpath(os.getcwd()), (
        "the working directory (no function_app.py or host.json at or above it or the main script)"
    )


def _app_folder_above(start: str) -> str | None:
    """The first folder at or above `start` holding one of `_APP_FILES`."""
    folder = os.path.realpath(start)
    while True:
        if any(os.path.isfile(os.path.join(folder, name)) for name in _APP_FILES):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


#: Local namespaces already warned about in this process (one warning each).
_warned_local: set[str] = set()
_log = logging.getLogger("blobsingleton")


def namespace(given: str | None = None) -> str:
    """`given`, else app setting BLOBSINGLETON_NAMESPACE, else `host_id()`; validated. The
    local fallback (no host id setting outside Azure) is logged once per process: processes
    started from another folder or machine get another namespace, and run the same work."""
    value = given or setting("BLOBSINGLETON_NAMESPACE")
    if not value:
        value, local = _host_id(os.environ)
        if local and value not in _warned_local:
            _warned_local.add(value)
            root, found = app_root()
            _log.warning(
                "blobsingleton namespace %r is this machine's name (%s) and a hash of the app"
                " folder %s (%s), as the Functions host names a local app (no"
                " AzureFunctionsWebHost__hostid, no BLOBSINGLETON_NAMESPACE): a process of"
                " this app started from any folder of this machine shares it, but one on"
                " another machine, or of a copy of the app in another folder, does not see"
                " these locks and run-once records and runs the same work again. Set"
                " BLOBSINGLETON_NAMESPACE (or AzureFunctionsWebHost__hostid) to one value for"
                " every process of this app.",
                value, socket.gethostname(), root, found,
            )  # fmt: skip
    if not _NAMESPACE.fullmatch(value):
        raise InvalidKey(
            value,
            "a namespace is 1 to 63 letters, digits, '_' or '-', starting with a letter or digit",
        )
    return value
