"""One exception hierarchy for the lease module; each carries the data a caller needs."""

from __future__ import annotations


class LeaseError(Exception):
    """Root of every error the lease module raises."""


class InvalidKey(LeaseError, ValueError):
    """A key cannot become a lock blob name (empty, too long, control characters, escaping)."""

    def __init__(self, key: object, reason: str) -> None:
        super().__init__(f"invalid lease key: {reason}")
        self.key = key
        self.reason = reason


class LeaseTimeout(LeaseError, TimeoutError):
    """The lease was held by someone else for the whole time the caller was willing to wait."""

    def __init__(self, key: str, waited: float) -> None:
        super().__init__(f"lease {key!r} is busy (waited {waited:.1f} s)")
        self.key = key
        self.waited = waited


class LeaseLost(LeaseError):
    """The holder can no longer be sure it holds the lease: stop before the next side effect."""

    def __init__(self, key: str, token: int | None, reason: str) -> None:
        super().__init__(f"lease {key!r} (token {token}) lost: {reason}")
        self.key = key
        self.token = token
        self.reason = reason


class LeaseNotHeld(LeaseError):
    """An operation that needs the lease was called on a lease that was never acquired."""


class StorageUnavailable(LeaseError):
    """Storage did not answer, or answered with a server error, after the client's retries."""

    def __init__(self, operation: str, cause: BaseException) -> None:
        super().__init__(f"storage unavailable during {operation}: {cause}")
        self.operation = operation
