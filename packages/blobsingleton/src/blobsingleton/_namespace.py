"""Whose keys these are: names in a namespace, by default the host id (docs/internals.md)."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import uuid
from collections.abc import Mapping

from blobsingleton.errors import InvalidKey, SettingMissing
from blobsingleton.settings import setting

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
