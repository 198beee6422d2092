"""Keys from user data (account ids, event ids) made safe blob names, in a namespace, by
default the host id (docs/internals.md)."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import unicodedata
import uuid
from collections.abc import Mapping

from blobsingleton.errors import InvalidKey, SettingMissing
from blobsingleton.settings import setting

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
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") for ch in key):
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
    values: Mapping[str, str | None] = os.environ if settings is None else settings

    def get(name: str) -> str:
        return values.get(name) or ""

    explicit = get("AzureFunctionsWebHost__hostid") or get("AzureFunctionsWebHost:hostid")
    if explicit:
        return explicit
    slot_name = get("WEBSITE_SITE_NAME")
    slot = get("WEBSITE_SLOT_NAME")
    if slot_name and slot and slot.lower() != "production":
        slot_name += f"-{slot}"
    slot_name = slot_name.lower()
    flex = get("WEBSITE_SKU").lower() == "flexconsumption" or bool(
        get("CONTAINER_NAME") and get("LEGION_SERVICE_HOST")
    )
    if flex:
        if not slot_name:
            raise _no_host_id()
        # Flex Consumption: the host hashes the name (MD5 read as a .NET Guid, no dashes).
        name_hash = hashlib.md5(slot_name.encode(), usedforsecurity=False).digest()
        return uuid.UUID(bytes_le=name_hash).hex
    if get("WEBSITE_INSTANCE_ID"):
        name = slot_name
    elif get("CONTAINER_NAME") and get("WEBSITE_HOSTNAME"):
        # Linux Consumption (a non-Azure container, without WEBSITE_HOSTNAME, counts as local).
        name = get("WEBSITE_HOSTNAME").replace(".azurewebsites.net", "")
    else:
        machine = "".join(ch for ch in socket.gethostname() if ch.isalnum())
        root = get("AzureWebJobsScriptRoot") or os.getcwd()
        digest = int(hashlib.sha256(os.path.abspath(root).encode()).hexdigest()[:8], 16)
        name = f"{machine}-{digest}"
    if not name:
        raise _no_host_id()
    return name[:MAX_HOST_ID_LENGTH].lower().rstrip("-")


def _no_host_id() -> SettingMissing:
    return SettingMissing(
        "AzureFunctionsWebHost__hostid",
        "no host id can be derived here (no site name): set AzureFunctionsWebHost__hostid or "
        "BLOBSINGLETON_NAMESPACE",
    )


def namespace(given: str | None = None) -> str:
    """`given`, else app setting BLOBSINGLETON_NAMESPACE, else `host_id()`; validated."""
    value = given or setting("BLOBSINGLETON_NAMESPACE") or host_id()
    if not _NAMESPACE.fullmatch(value):
        raise InvalidKey(
            value,
            "a namespace is 1 to 63 letters, digits, '_' or '-', starting with a letter or digit",
        )
    return value
