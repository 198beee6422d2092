"""Storage's answers as the library's errors, in one place: Blob Storage's error codes in one
table (`MEANINGS`), what a lease, a run-once record and the waiting line make of them, no
answer (or a server error after the client's retries) as `StorageUnavailable`, credentials the
account refuses as `CredentialsRefused`; and the one create-if-missing (docs/internals.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from enum import Enum
from typing import Any, TypeVar

from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
)

from blobsingleton import _telemetry as telemetry
from blobsingleton.errors import (
    CredentialsRefused,
    LeaseError,
    LeaseLost,
    RecordConflict,
    StorageUnavailable,
)

T = TypeVar("T")


class Meaning(Enum):
    """What a Blob Storage error code means to the library."""

    BUSY = "someone else holds the lease"
    NOT_OURS = "the lease is not, or no longer, ours"
    NO_BLOB = "the blob does not exist"
    NO_CONTAINER = "the container does not exist"
    EXISTS = "it exists already"
    CHANGED = "the blob is not as the condition said"
    OTHER = "anything else"


#: Blob Storage's error codes (`x-ms-error-code`) by what they mean to the library.
MEANINGS: dict[str, Meaning] = {
    "LeaseAlreadyPresent": Meaning.BUSY,
    "LeaseIsBreakingAndCannotBeAcquired": Meaning.BUSY,
    "LeaseIdMismatchWithLeaseOperation": Meaning.NOT_OURS,
    "LeaseNotPresentWithLeaseOperation": Meaning.NOT_OURS,
    "LeaseIsBrokenAndCannotBeRenewed": Meaning.NOT_OURS,
    "LeaseIdMismatchWithBlobOperation": Meaning.NOT_OURS,
    "LeaseLost": Meaning.NOT_OURS,
    "LeaseIdMissing": Meaning.NOT_OURS,
    "LeaseNotPresentWithBlobOperation": Meaning.NOT_OURS,
    "BlobNotFound": Meaning.NO_BLOB,
    "ContainerNotFound": Meaning.NO_CONTAINER,
    "BlobAlreadyExists": Meaning.EXISTS,
    "ContainerAlreadyExists": Meaning.EXISTS,
    "ConditionNotMet": Meaning.CHANGED,
}


def error_code(error: BaseException) -> str:
    """The service's error code of a storage error, as a plain string ("" when none)."""
    code = getattr(error, "error_code", None)
    return str(getattr(code, "value", code) or "")


def meaning(error: BaseException) -> Meaning:
    """What the storage answer `error` means (`MEANINGS`, by its error code)."""
    return MEANINGS.get(error_code(error), Meaning.OTHER)


def is_transient(error: BaseException) -> bool:
    """Worth retrying later: no answer, a timeout, throttling or a server error."""
    if not isinstance(error, AzureError):
        return False
    if not isinstance(error, HttpResponseError):
        return True  # a transport failure: no answer at all
    status = error.status_code
    return status is None or status in (408, 429) or status >= 500


#: Each service URL a client was built for -> (its app setting, its account), so that a
#: refusal names them (`_connection.StorageAccount` notes its clients here).
_owners: dict[str, tuple[str, str]] = {}


def note_client(url: str, setting: str, account: str) -> None:
    """A client for `url` was built from app setting `setting`, for `account`."""
    _owners[url] = (setting, account)


def refused(error: BaseException) -> CredentialsRefused | None:
    """`error` as `CredentialsRefused` naming the setting and the account when it is the
    account refusing the credentials (HTTP 401 or 403, or no token), else None."""
    if not isinstance(error, HttpResponseError):  # ClientAuthenticationError is one
        return None
    if not isinstance(error, ClientAuthenticationError) and error.status_code not in (401, 403):
        return None
    request = getattr(error.response, "request", None)
    url = str(getattr(request, "url", "") or "")
    setting, account = next(
        (owner for base, owner in _owners.items() if url.startswith(base)), ("", "unknown")
    )
    code = error_code(error) or str(error.status_code or type(error).__name__)
    return CredentialsRefused(
        setting or "unknown (a client given to the library)", account,
        f"the account refused the credentials ({code})",
    )  # fmt: skip


@contextlib.contextmanager
def unavailable_as(operation: str) -> Iterator[None]:
    """Let answered errors through; turn transient failures into `StorageUnavailable` and
    credentials the account refuses into `CredentialsRefused` (naming setting and account)."""
    telemetry.storage(operation)
    try:
        yield
    except AzureError as error:
        denied = refused(error)
        if denied is not None:
            raise denied from None
        if is_transient(error):
            raise StorageUnavailable(operation, error) from error
        raise


@contextlib.contextmanager
def refusal_named() -> Iterator[None]:
    """Credentials the account refuses as `CredentialsRefused`; every other error unchanged
    (for callers whose transient failures keep the SDK's errors, as a DEFER's send)."""
    try:
        yield
    except AzureError as error:
        denied = refused(error)
        if denied is None:
            raise
        raise denied from None


def answered_error(response: Any, request: str) -> HttpResponseError:
    """A storage answer of 300 or more to a request the library sent over a client's pipeline,
    as the SDK raises it (`error_code` from `x-ms-error-code`; 404 `ResourceNotFoundError`),
    so that the translations here read it whichever way the request went."""
    kind = ResourceNotFoundError if response.status_code == 404 else HttpResponseError
    code = response.headers.get("x-ms-error-code")
    error = kind(message=f"{request} answered {response.status_code} ({code})", response=response)
    error.error_code = code  # type: ignore[attr-defined]  # as the SDK sets it
    return error


# What a lease makes of an answer.


class LockBusy(LeaseError):
    """Internal: someone else holds the lease right now."""


class LockMissing(LeaseError):
    """Internal: the lock blob or its container does not exist yet (the message: its code)."""


@contextlib.contextmanager
def lease_errors(operation: str, key: str, token: int | None = None) -> Iterator[None]:
    """A lease operation's answers as `LockBusy`, `LockMissing` or `LeaseLost` (any 409 or
    412 but an acquire's is a lease no longer ours), besides `unavailable_as`'s."""
    try:
        with unavailable_as(operation):
            yield
    except HttpResponseError as error:
        means = meaning(error)
        if means is Meaning.BUSY:
            raise LockBusy(error_code(error)) from error
        if means in (Meaning.NO_BLOB, Meaning.NO_CONTAINER):
            raise LockMissing(error_code(error)) from error
        if means is Meaning.NOT_OURS or (
            operation != "acquire" and error.status_code in (409, 412)
        ):
            reason = f"{operation}: {error_code(error) or error.status_code}"
            raise LeaseLost(key, token, reason) from error
        raise


# What a run-once record makes of an answer.


@contextlib.contextmanager
def record_errors(operation: str) -> Iterator[None]:
    """A record operation's lost race (it exists, it changed, it is gone: any 404 or 412) as
    `RecordConflict`, besides `unavailable_as`'s."""
    try:
        with unavailable_as(operation):
            yield
    except HttpResponseError as error:
        means = meaning(error)
        if means in (Meaning.EXISTS, Meaning.CHANGED, Meaning.NO_BLOB) or (
            error.status_code in (404, 412)
        ):
            raise RecordConflict(error_code(error) or str(error.status_code)) from error
        raise


# Creating what is missing.


def created_if_missing(
    call: Callable[[], T], container: Any, blob: Any = None, **options: Any
) -> T:
    """`call()`; if its container, or given `blob` (a `BlobClient`) that empty page blob, does
    not exist yet, create what is missing and call again (another instance creating it first
    is success too). Every other answer is `call`'s own."""
    try:
        return call()
    except HttpResponseError as error:
        means = meaning(error)
        if means is Meaning.NO_CONTAINER:
            with contextlib.suppress(ResourceExistsError):
                container.create_container(**options)
        if blob is not None and means in (Meaning.NO_CONTAINER, Meaning.NO_BLOB):
            try:
                blob.create_page_blob(0, if_none_match="*", **options)
            except HttpResponseError as creating:  # made meanwhile (and maybe leased): fine
                if meaning(creating) not in (Meaning.EXISTS, Meaning.NOT_OURS):
                    raise
        elif means is not Meaning.NO_CONTAINER:
            raise
    return call()
