"""Every error the library raises: one root, one subclass per failure. Each also subclasses
the builtin it behaves like (`except TimeoutError` works), carries its data as attributes and
survives pickling, so it can cross a process pool."""

from __future__ import annotations

import inspect
from typing import Any


class BlobSingletonError(Exception):
    """Root of every error this library raises."""

    def __reduce__(self) -> str | tuple[Any, ...]:
        # Rebuilt from the attributes its constructor's parameters name (each error keeps them).
        init = type(self).__init__
        if not inspect.isfunction(init):  # a builtin's: the message is all there is
            return super().__reduce__()
        names = list(inspect.signature(init).parameters)[1:]
        return (type(self), tuple(getattr(self, name) for name in names))


class OutsideGuardedCall(BlobSingletonError, LookupError):
    """`current_lease()` or `current_run()` was called outside the call its decorator guards."""

    def __init__(self, accessor: str, decorator: str) -> None:
        super().__init__(f"{accessor} called outside a {decorator} function")
        self.accessor, self.decorator = accessor, decorator


class SettingMissing(BlobSingletonError, LookupError):
    """An app setting the library needs is not set (or the settings contradict each other)."""

    def __init__(self, name: str, detail: str = "") -> None:
        super().__init__(detail or f"app setting {name!r} is not set")
        self.name, self.detail = name, detail


class InvalidKey(BlobSingletonError, ValueError):
    """A key cannot become a blob name (empty, too long, control characters, escaping)."""

    def __init__(self, key: object, reason: str) -> None:
        super().__init__(f"invalid key: {reason}")
        self.key, self.reason = key, reason


class KeyTemplateError(BlobSingletonError, LookupError):
    """A `{field}` of a key template could not be resolved from the invocation."""

    def __init__(self, template: str, field: str, reason: str) -> None:
        super().__init__(f"key template {template!r}: {{{field}}} {reason}")
        self.template, self.field, self.reason = template, field, reason


#: The host's message for a schedule it cannot read (the timer extension's CronSchedule).
HOST_MESSAGE = (
    "The schedule expression '{}' was not recognized as a valid cron expression or timespan string."
)


class InvalidSchedule(BlobSingletonError, ValueError):
    """A timer schedule the host would refuse (`blobsingleton.schedules`): the function fails
    to index, as on Azure."""

    def __init__(self, schedule: str, reason: str, function: str | None = None) -> None:
        where = f"Error indexing method 'Functions.{function}'. " if function else ""
        super().__init__(f"{where}{HOST_MESSAGE.format(schedule)} ({reason})")
        self.schedule, self.reason, self.function = schedule, reason, function


class NoOccurrence(BlobSingletonError, LookupError):
    """A valid timer schedule that never fires (an impossible date such as February 30)."""

    def __init__(self, schedule: str) -> None:
        super().__init__(f"schedule {schedule!r} has no occurrence")
        self.schedule = schedule


class OccurrenceRefused(BlobSingletonError, ValueError):
    """A run of a scheduled function's occurrence asked for outside what its timer allows (an
    external scheduler's call too late for the catch-up window, not an occurrence, not due)."""

    def __init__(self, function: str, occurrence: Any, reason: str) -> None:
        when = f" {occurrence:%Y-%m-%dT%H:%M:%SZ}" if occurrence is not None else ""
        super().__init__(f"{function}: occurrence{when} refused: {reason}")
        self.function, self.occurrence, self.reason = function, occurrence, reason


class StorageUnavailable(BlobSingletonError):
    """Storage did not answer, or answered with a server error, after the client's retries."""

    def __init__(self, operation: str, cause: BaseException | str) -> None:
        super().__init__(f"storage unavailable during {operation}: {cause}")
        self.operation, self.cause = operation, str(cause)


class StorageAccountError(BlobSingletonError):
    """The storage account an app setting names cannot be used: its connection string cannot
    be read (`InvalidConnectionString`), or the account refuses the credentials
    (`CredentialsRefused`). Names the setting and the account, never a key."""

    def __init__(self, setting: str, account: str, reason: str) -> None:
        super().__init__(f"app setting {setting} (storage account {account!r}): {reason}")
        self.setting, self.account, self.reason = setting, account, reason


class InvalidConnectionString(StorageAccountError, ValueError):
    """The connection string is blank or malformed, or its account key is not base64."""


class CredentialsRefused(StorageAccountError, PermissionError):
    """The account refused the credentials: a wrong or rotated key, an expired SAS, an
    identity without a data role on the account, or one that could not get a token."""


class LeaseError(BlobSingletonError):
    """Root of the lease errors."""


class LeaseTimeout(LeaseError, TimeoutError):
    """The lease was held by someone else for the whole time the caller was willing to wait."""

    def __init__(self, key: str, waited: float) -> None:
        super().__init__(f"lease {key!r} is busy (waited {waited:.1f} s)")
        self.key, self.waited = key, waited


class LeaseLost(LeaseError):
    """The holder can no longer be sure it holds the lease: stop before the next side effect."""

    def __init__(self, key: str, token: int | None, reason: str) -> None:
        super().__init__(f"lease {key!r} (token {token}) lost: {reason}")
        self.key, self.token, self.reason = key, token, reason


class LeaseNotHeld(LeaseError):
    """An operation that needs the lease was called on a lease that is not held."""


class OnceError(BlobSingletonError):
    """Root of the run-once errors."""


class AlreadyInProgress(OnceError, TimeoutError):
    """Another delivery of the same key is running (and has not expired)."""

    def __init__(self, key: str, expires_at: float) -> None:
        super().__init__(f"run-once key {key!r} is in progress elsewhere")
        self.key, self.expires_at = key, expires_at


class PayloadMismatch(OnceError, ValueError):
    """The same key arrived with a different payload than the one recorded. `fields`: names
    (never values) of a mapping payload's fields that differ; empty for a payload compared whole."""

    def __init__(self, key: str, fields: tuple[str, ...] = ()) -> None:
        differ = f" (fields that differ: {', '.join(fields)})" if fields else ""
        super().__init__(f"run-once key {key!r} was used before with a different payload{differ}")
        self.key, self.fields = key, tuple(fields)


class RunLost(OnceError):
    """This run no longer owns its run-once key: stop before the next side effect."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"run-once key {key!r} lost: {reason}")
        self.key, self.reason = key, reason


class ResultNotStorable(OnceError, TypeError):
    """A `@once` function returned a value its result codec cannot store for duplicates.
    Raised by the first call (its work ran; the key is completed) and by every duplicate."""

    def __init__(self, key: str, function: str, type_name: str) -> None:
        super().__init__(
            f"run-once key {key!r} of {function}: a result of type {type_name} cannot be"
            " stored for its duplicates; return JSON, a dataclass, Decimal, datetime, an"
            " HttpResponse..., or pass @once(result=codec)"
        )
        self.key, self.function, self.type_name = key, function, type_name


class BatchFailed(OnceError):
    """Items of a batch run with `fn.each(items)` failed (or stayed busy under `Busy.WAIT`),
    after every other item ran. `keys`: each failed item's key (None: it had none);
    `errors`: what each raised, in the batch's order."""

    def __init__(
        self, function: str, total: int, keys: tuple[str | None, ...],
        errors: tuple[BaseException, ...],
    ) -> None:  # fmt: skip
        shown = ", ".join(repr(k) for k in keys[:5]) + (", ..." if len(keys) > 5 else "")
        first = f"{type(errors[0]).__name__}: {errors[0]}" if errors else "none"
        super().__init__(
            f"{len(keys)} of {total} items of {function} failed (keys {shown}); first: {first}"
        )
        self.function, self.total, self.keys, self.errors = function, total, keys, errors


class RecordConflict(OnceError):
    """A conditional write lost a race (the record exists, changed, or is gone); `existing`:
    the record there now, when the store knows it without another request."""

    def __init__(self, reason: str, existing: Any = None) -> None:
        super().__init__(reason)
        self.existing = existing

    def __reduce__(self) -> str | tuple[Any, ...]:
        return (type(self), (str(self), self.existing))


class OpsError(BlobSingletonError):
    """An operation an operator asked for cannot be done; the message says why."""


class NotFound(OpsError, LookupError):
    """No lock or run-once record with that key."""


class NotHeld(OpsError):
    """The lock is not held: there is nothing to break."""


class InvalidRequest(OpsError, ValueError):
    """A reason, prefix, state or page size that cannot be used."""


__all__ = [
    "AlreadyInProgress", "BatchFailed", "BlobSingletonError", "CredentialsRefused",
    "InvalidConnectionString", "InvalidKey", "InvalidRequest", "InvalidSchedule",
    "KeyTemplateError", "LeaseError", "LeaseLost", "LeaseNotHeld", "LeaseTimeout",
    "NoOccurrence", "NotFound", "NotHeld", "OccurrenceRefused", "OnceError", "OpsError",
    "OutsideGuardedCall",
    "PayloadMismatch", "RecordConflict", "ResultNotStorable", "RunLost", "SettingMissing",
    "StorageAccountError", "StorageUnavailable",
]  # fmt: skip
