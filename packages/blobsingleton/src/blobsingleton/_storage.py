"""Storage errors, storage's clock and create-on-missing, in one place (docs/internals.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, TypeVar

from azure.core.exceptions import AzureError, HttpResponseError, ResourceExistsError

from blobsingleton import _invocation as telemetry
from blobsingleton._azure_sdk import response_hook
from blobsingleton._connection import refused
from blobsingleton.errors import StorageUnavailable

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient

T = TypeVar("T")

#: HTTP dates are whole seconds: the instant may be up to this much later than the value.
TIME_RESOLUTION = 1.0


def error_code(error: BaseException) -> str:
    """The service's error code of a storage error, as a plain string ("" when none)."""
    code = getattr(error, "error_code", None)
    return str(getattr(code, "value", code) or "")


def is_transient(error: BaseException) -> bool:
    """Worth retrying later: no answer, a timeout, throttling or a server error."""
    if not isinstance(error, AzureError):
        return False
    if not isinstance(error, HttpResponseError):
        return True  # a transport failure: no answer at all
    status = error.status_code
    return status is None or status in (408, 429) or status >= 500


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


def create_container_quietly(container: ContainerClient, **options: Any) -> None:
    """Create the container; another instance creating it first is success too."""
    with contextlib.suppress(ResourceExistsError):
        container.create_container(**options)


def retry_on_missing_container(
    container: ContainerClient, call: Callable[[], T], **options: Any
) -> T:
    """Run `call`; if its container does not exist yet, create it and run `call` once more."""
    try:
        return call()
    except HttpResponseError as error:
        if error_code(error) != "ContainerNotFound":
            raise
    create_container_quietly(container, **options)
    return call()


def http_date(text: str | None) -> datetime | None:
    """An HTTP date header's moment (None: absent or not a date)."""
    if not text:
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
