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
import unicodedata
import uuid
from collections.abc import Callable, Mapping
from datetime import date, datetime
from decimal import Decimal
from enum import Enum
from typing import Any, Literal, Protocol, runtime_checkable

from blobsingleton import schedules
from blobsingleton.errors import InvalidKey, KeyTemplateError, SettingMissing
from blobsingleton.queues import QueueMessageLike
from blobsingleton.settings import resolve_placeholders, setting

#: Whose keys: a function's own, or the app's (WebJobs' SingletonScope.Function / Host).
Scope = Literal["function", "app"]
_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\}")


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


def resolve_key(
    template: str,
    signature: inspect.Signature,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    schedule: str | None = None,
) -> str:
    """The key `template` names for one invocation of a function with `signature`."""
    bound = signature.bind_partial(*args, **kwargs).arguments
    text = resolve_placeholders(template)
    return _FIELD.sub(lambda m: _lookup(template, m.group(1), bound, schedule), text)


def _lookup(template: str, field: str, bound: Mapping[str, Any], schedule: str | None) -> str:
    head, *path = field.split(".")
    if head in bound:
        return _follow(template, field, bound[head], path)
    for value in bound.values():
        if isinstance(value, HttpRequestLike):
            for source in (value.route_params, value.params):
                if head in source:
                    return _follow(template, field, source[head], path)
        elif isinstance(value, QueueMessageLike):
            body = _json_object(value)
            if body is not None and head in body:
                return _follow(template, field, body[head], path)
        elif isinstance(value, TimerRequestLike) and head == "occurrence" and not path:
            return _occurrence(template, value, schedule)
    raise KeyTemplateError(
        template,
        field,
        "is not an argument, a JSON body field, a route or query parameter of this invocation",
    )


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


def _json_object(message: QueueMessageLike) -> dict[str, Any] | None:
    try:
        body = json.loads(message.get_body())
    except (ValueError, RecursionError):
        return None
    return body if isinstance(body, dict) else None


def _occurrence(
    template: str, timer: TimerRequestLike, schedule: str | None, now: datetime | None = None
) -> str:
    """The schedule occurrence this timer invocation stands for (ISO UTC), the same on every
    instance (`schedules.fired_occurrence`)."""
    if schedule is None:
        raise KeyTemplateError(template, "occurrence", "needs the timer's schedule= argument")
    try:
        text = resolve_placeholders(schedule)
        moment = schedules.fired_occurrence(text, timer.schedule_status, now)
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
    the app folder): the host's ScriptHostIdProvider.GetDefaultHostId and its `IsLocal`."""

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
        root = get("AzureWebJobsScriptRoot") or os.getcwd()
        digest = int(hashlib.sha256(os.path.abspath(root).encode()).hexdigest()[:8], 16)
        name, local = f"{machine}-{digest}", True
    if not name:
        raise SettingMissing(
            "AzureFunctionsWebHost__hostid",
            "no host id can be derived here (no site name): set AzureFunctionsWebHost__hostid or "
            "BLOBSINGLETON_NAMESPACE",
        )
    return name[:MAX_HOST_ID_LENGTH].lower().rstrip("-"), local


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
            _log.warning(
                "blobsingleton namespace %r is this machine's name and a hash of the app folder"
                " (no AzureFunctionsWebHost__hostid, no BLOBSINGLETON_NAMESPACE): processes"
                " started from another folder or machine against the same storage account do"
                " not see these locks and run-once records and run the same work again. Set"
                " BLOBSINGLETON_NAMESPACE (or AzureFunctionsWebHost__hostid) to one value for"
                " every process of this app.",
                value,
            )
    if not _NAMESPACE.fullmatch(value):
        raise InvalidKey(
            value,
            "a namespace is 1 to 63 letters, digits, '_' or '-', starting with a letter or digit",
        )
    return value
