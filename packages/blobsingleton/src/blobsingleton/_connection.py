"""Where the library's blobs and deferred messages live and how it talks to the account: app
settings, one storage account and its clients, the conventional containers and the service's
clock (its errors: `_storage_errors`). Low in the layering: it imports no backend
(docs/internals.md)."""

from __future__ import annotations

import base64
import binascii
import importlib
import os
import re
import sys
import threading
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from blobsingleton._azure_sdk import response_hook
from blobsingleton._storage_errors import note_client
from blobsingleton.errors import InvalidConnectionString, SettingMissing

if TYPE_CHECKING:
    from azure.storage.blob import BlobServiceClient, ContainerClient

T = TypeVar("T")

# App settings, read the way the Functions host exposes them: as environment variables.

_PLACEHOLDER = re.compile(r"%([A-Za-z_][A-Za-z0-9_:.\-]*)%")


def setting(name: str, default: str | None = None) -> str | None:
    """The value of app setting `name`, or `default` when it is unset or empty."""
    value = os.environ.get(name)
    return value if value else default


def require(name: str) -> str:
    """The value of app setting `name`; `SettingMissing` when it is unset."""
    value = setting(name)
    if value is None:
        raise SettingMissing(name)
    return value


def resolve_placeholders(template: str) -> str:
    """Replace each `%NAME%` by app setting NAME, as the host does in binding expressions."""
    return _PLACEHOLDER.sub(lambda m: require(m.group(1)), template)


# One storage account and its clients.

#: What a client built here retries a failed request with, unless its options say otherwise:
#: 3 more attempts about a second apart (at most 4.5 s of waiting), well within a third of the
#: 15 s a run-once claim or a lease lives unconfirmed. The SDK's default first waits 15 to 21 s,
#: past the claim it was serving (docs/storage-under-load.md). Timeouts: seconds to connect,
#: and without a byte read.
RETRY = {"backoff": 1.0, "random_jitter_range": 0.5, "retry_total": 3}
TIMEOUTS = {"connection_timeout": 5, "read_timeout": 20}
_RETRY_OPTIONS = ("retry_policy", "retry_total", "retry_connect", "retry_read", "retry_status")


@dataclass(frozen=True)
class StorageAccount:
    """How to reach one storage account: a connection string, or service URLs + a credential.
    `client_options` go to every client built here (retry settings, a transport, per-call
    hooks); `name` is the app setting it came from, for error messages."""

    #: Holds the account key: never shown in a repr (which logs and tracebacks print).
    connection_string: str | None = field(default=None, repr=False)
    blob_url: str | None = None
    queue_url: str | None = None
    credential: Any = field(default=None, repr=False)
    client_options: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    name: str = "AzureWebJobsStorage"
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)
    _lock: threading.Lock = field(
        default_factory=threading.Lock, compare=False, hash=False, repr=False
    )

    def with_options(self, **client_options: Any) -> StorageAccount:
        """The same account with more client options (its clients are built anew)."""
        return replace(
            self, client_options={**self.client_options, **client_options}, _cache={},
            _lock=threading.Lock(),
        )  # fmt: skip

    def blob_service(self) -> BlobServiceClient:
        """The account's `BlobServiceClient` (built once, shared by every lease and record)."""
        return self._client("blob", "BlobServiceClient", self.blob_url)  # type: ignore[no-any-return]

    def queue_service(self) -> Any:
        """The account's `QueueServiceClient` (deferral only; needs `azure-storage-queue`)."""
        return self._client("queue", "QueueServiceClient", self.queue_url)

    def _client(self, kind: str, class_name: str, url: str | None) -> Any:
        with self._lock:
            if kind not in self._cache:
                sdk = importlib.import_module(f"azure.storage.{kind}")
                client_cls = getattr(sdk, class_name)
                options = {**TIMEOUTS, **self.client_options}
                if not any(name in options for name in _RETRY_OPTIONS):
                    options["retry_policy"] = sdk.LinearRetry(**RETRY)
                if "transport" not in options:  # what `requests` would read per request, given once
                    options = {**(requests_environment() or {}), **options}
                if self.connection_string:
                    client = self._from_connection_string(client_cls, options)
                elif url:
                    client = client_cls(url, credential=self.credential, **options)
                else:
                    raise SettingMissing(f"{self.name}__{kind}ServiceUri")
                note_client(str(client.url), self.name, _account_of(client))
                self._cache[kind] = client
            return self._cache[kind]

    def _from_connection_string(self, client_cls: Any, options: dict[str, Any]) -> Any:
        """The client of the connection string; one that cannot be read, or whose key is not
        base64 (which the SDK finds only when signing the first request), is refused here."""
        text = self.connection_string or ""
        named = re.search(r"(?:^|;)\s*AccountName\s*=\s*([^;]*)", text, flags=re.IGNORECASE)
        account = named.group(1).strip() if named else "unknown"
        try:
            client = client_cls.from_connection_string(text, **options)
        except ValueError:
            raise InvalidConnectionString(
                self.name, account, "the connection string is blank or malformed"
            ) from None
        key = getattr(client.credential, "account_key", None)
        if isinstance(key, str):
            try:
                base64.b64decode(key, validate=True)
            except (binascii.Error, ValueError):
                raise InvalidConnectionString(
                    self.name, _account_of(client), "its AccountKey is not base64"
                ) from None
        return client


@dataclass(frozen=True)
class Storage:
    """Where a decorator's records (`@once`) or locks (`@singleton`) live, as one value:
    `@once(key, storage=Storage(account, namespace="billing"))`. Blobs of `account` (default:
    AzureWebJobsStorage) under `namespace` (default: app setting BLOBSINGLETON_NAMESPACE, else
    the host id). `container`: `@singleton`'s locks in this container instead of the account's
    `locks` (`@once` refuses it: give a `BlobRecordStore` of that container as `storage=`).
    A deferral's copy goes to `account`'s queue unless `Busy.defer(storage=...)` names another."""

    account: StorageAccount | None = None
    namespace: str | None = None
    container: ContainerClient | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.account is not None and self.container is not None:
            raise ValueError(
                "Storage(account=..., container=...): the container's own account holds the "
                "locks; give one of them (a deferral's queue: Busy.defer(storage=...))"
            )


def _account_of(client: Any) -> str:
    return str(getattr(client, "account_name", None) or "unknown")


def requests_environment() -> dict[str, Any] | None:
    """Client options for what `requests` would read from the environment on every request;
    None where it cannot be given once (a `*_proxy` variable, a netrc file, off Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    environ = os.environ
    if any(name.lower().endswith("_proxy") and value for name, value in environ.items()):
        return None
    if environ.get("NETRC"):
        return None
    try:
        home = Path.home()
    except RuntimeError:  # no home directory: no netrc there either
        home = None
    if home is not None and any((home / name).exists() for name in (".netrc", "_netrc")):
        return None
    bundle = environ.get("REQUESTS_CA_BUNDLE") or environ.get("CURL_CA_BUNDLE")
    return {"use_env_settings": False, **({"connection_verify": bundle} if bundle else {})}


_accounts: dict[tuple[Any, ...], StorageAccount] = {}
_default_options: dict[str, Any] = {}
_default_credential: list[Any] = []  # empty: DefaultAzureCredential
_accounts_lock = threading.Lock()
_SUFFIXES = ("", "__accountName", "__blobServiceUri", "__queueServiceUri", "__clientId")


def set_client_options(**client_options: Any) -> None:
    """Client options for every account `from_settings` builds from now on: a test or a local
    host adds a request-counting `raw_request_hook` or retry settings, unknown to the app."""
    with _accounts_lock:
        _default_options.clear()
        _default_options.update(client_options)
        _accounts.clear()


def set_default_credential(credential: Any | None) -> None:
    """The credential identity-based settings (`__accountName`, `__*ServiceUri`) use from now
    on instead of a `DefaultAzureCredential` (None: that again), e.g. for a local emulator."""
    with _accounts_lock:
        _default_credential.clear()
        if credential is not None:
            _default_credential.append(credential)
        _accounts.clear()


def from_settings(name: str = "AzureWebJobsStorage") -> StorageAccount:
    """The account app setting `name` names: a connection string, or `name__*` identity settings.
    Built once per distinct value, so leases and records share its clients; both kinds of
    settings, or neither, raise `SettingMissing` naming them."""
    cache_key = (name, *(setting(name + suffix) for suffix in _SUFFIXES))
    with _accounts_lock:
        account = _accounts.get(cache_key)
        if account is None:
            account = _accounts[cache_key] = _read_settings(name, dict(_default_options))
        return account


def _read_settings(name: str, client_options: dict[str, Any]) -> StorageAccount:
    value = setting(name)
    account = setting(f"{name}__accountName")
    blob = setting(f"{name}__blobServiceUri")
    queue = setting(f"{name}__queueServiceUri")
    identity = [n for n, v in (("accountName", account), ("blobServiceUri", blob),
                                ("queueServiceUri", queue)) if v]  # fmt: skip
    if value and identity:
        given = ", ".join(f"{name}__{n}" for n in identity)
        raise SettingMissing(
            name,
            f"both a connection string in {name} and identity-based settings ({given})"
            " are set; keep one",
        )
    if value:
        return StorageAccount(connection_string=value, client_options=client_options, name=name)
    if account:
        blob = blob or f"https://{account}.blob.core.windows.net"
        queue = queue or f"https://{account}.queue.core.windows.net"
    if not (blob or queue):
        raise SettingMissing(
            name,
            f"neither {name} (a connection string) nor {name}__accountName /"
            f" {name}__blobServiceUri (identity-based) is set",
        )
    if _default_credential:
        credential = _default_credential[0]
    else:
        azure_identity = importlib.import_module("azure.identity")  # the [identity] extra
        client_id = setting(f"{name}__clientId")
        credential = azure_identity.DefaultAzureCredential(managed_identity_client_id=client_id)
    return StorageAccount(
        blob_url=blob, queue_url=queue, credential=credential,
        client_options=client_options, name=name,
    )  # fmt: skip


# The containers leases and records live in when none is given.

LOCK_CONTAINER = ("LEASE_CONTAINER", "locks")
RECORD_CONTAINER = ("RUNONCE_CONTAINER", "runonce")


def container(
    given: ContainerClient | None,
    convention: tuple[str, str],
    storage: StorageAccount | None = None,
) -> ContainerClient:
    """`given`, else the conventional container of `storage` (default: AzureWebJobsStorage)."""
    if given is not None:
        return given
    name = setting(convention[0], convention[1]) or convention[1]
    return (storage or from_settings()).blob_service().get_container_client(name)


# Storage's clock.
#: HTTP dates are whole seconds: the instant may be up to this much later than the value.
TIME_RESOLUTION = 1.0


_MONTHS = {
    name: n
    for n, name in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}


def http_date(text: str | None) -> datetime | None:
    """An HTTP date header's moment (None: absent or not a date). Storage's own form,
    `Sat, 28 Nov 2026 01:20:00 GMT`, is read directly (every answer carries two: a tenth of
    `email.utils`' cost); any other form, as `email.utils` reads it."""
    if not text:
        return None
    parts = text.split()
    if len(parts) == 6 and parts[5] == "GMT" and parts[2] in _MONTHS:
        clock = parts[4].split(":")
        try:
            return datetime(int(parts[3]), _MONTHS[parts[2]], int(parts[1]),
                            int(clock[0]), int(clock[1]), int(clock[2]), tzinfo=UTC)  # fmt: skip
        except (ValueError, IndexError):
            return None
    try:
        return parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None


def epoch(moment: datetime | None) -> float | None:
    """A service timestamp as epoch seconds (naive datetimes are UTC, as the SDK gives them)."""
    if moment is None:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


class ServiceTime:
    """The service's clock at its answer (errors too): pass as a call's `raw_response_hook`,
    read `.at`. It calls the hook the client was built with, so an app's hook still runs."""

    def __init__(self, client: Any = None) -> None:
        self.at: float | None = None
        self._chained = response_hook(client)

    def __call__(self, response: Any) -> None:
        header = response.http_response.headers.get("Date")
        if header:
            self.at = epoch(http_date(header))
        if self._chained is not None:
            self._chained(response)
