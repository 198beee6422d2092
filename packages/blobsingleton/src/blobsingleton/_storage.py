"""Storage errors, read and translated in one place, and create-on-missing for containers.

The SDK attaches the service's `x-ms-error-code` to an `HttpResponseError` as `error_code`
(a string or a `StorageErrorCode` enum). Every decision in this library is made on that code,
never on message text, and every transport failure becomes `StorageUnavailable`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from azure.core.exceptions import AzureError, HttpResponseError, ResourceExistsError

from blobsingleton.errors import StorageUnavailable

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient

T = TypeVar("T")


def error_code(error: BaseException) -> str:
    """The service's error code of a storage error, as a plain string ("" when none)."""
    code = getattr(error, "error_code", None)
    return str(getattr(code, "value", code) or "")


def status_code(error: BaseException) -> int | None:
    status = getattr(error, "status_code", None)
    return status if isinstance(status, int) else None


def is_transient(error: BaseException) -> bool:
    """Worth retrying later: no answer, a timeout, throttling or a server error."""
    if not isinstance(error, AzureError):
        return False
    if not isinstance(error, HttpResponseError):
        return True  # a transport failure: no answer at all
    status = status_code(error)
    return status is None or status in (408, 429) or status >= 500


@contextlib.contextmanager
def unavailable_as(operation: str) -> Iterator[None]:
    """Let answered errors through; turn transient failures into `StorageUnavailable`."""
    try:
        yield
    except AzureError as error:
        if is_transient(error):
            raise StorageUnavailable(operation, error) from error
        raise


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
