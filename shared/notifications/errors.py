"""Why a send failed, split by what the caller should do about it."""

from __future__ import annotations


class EmailError(Exception):
    """Root of the errors an `EmailSender` raises."""


class PermanentEmailError(EmailError):
    """The provider refused this email for good (a 4xx other than 429): retrying cannot help.

    The message holds the status and the provider's error text, never the API key or addresses.
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class TransientEmailError(EmailError):
    """The provider was unreachable, overloaded or failing on every attempt: try again later."""

    def __init__(self, message: str, *, attempts: int, status: int | None = None) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.status = status
