"""The batch-job exceptions; each carries what the caller needs to answer or log it."""

from __future__ import annotations

# One thing wrong with a request, by JSON path (`units[3].id`): the models' own.
from shared.models import Problem as Problem


class JobError(Exception):
    """Root of every error the jobs package raises."""


class InvalidJob(JobError, ValueError):
    """The job request cannot be accepted as it is (an HTTP 400)."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(f"{p.field}: {p.message}" for p in problems))
        self.problems = problems


class JobExists(JobError):
    """The job id is taken by a different job, or by a job that already finished (HTTP 409)."""

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__(f"job {job_id!r} {reason}")
        self.job_id = job_id
        self.reason = reason


class DefinitionChanged(JobError):
    """The definition blob of a job changed (or vanished) between its validation and the
    queueing of its units: the submission stops (HTTP 409)."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"the units blob {name!r} changed while the job was being submitted; the job id "
            "stays taken by what was validated: submit that again, or use another job id"
        )
        self.name = name


class InvalidUnitMessage(JobError, ValueError):
    """A unit message that is not one this app wrote: it can never be processed."""


class InvalidAnnounceMessage(JobError, ValueError):
    """An announce message that is not one this app wrote: it can never be processed."""


class PermanentUnitError(JobError):
    """Raised by a unit handler when the unit can never succeed: it is recorded as failed
    at once, without the host's retries."""


class BlockedCallback(JobError, ValueError):
    """A callback URL the app refuses to call (scheme, credentials, blocked address)."""


class UnresolvableCallback(BlockedCallback):
    """The callback host name does not resolve (refused at submission, retried at post time:
    a DNS outage is transient)."""


class CallbackUnavailable(JobError):
    """The callback receiver did not answer successfully after every attempt (5xx, timeouts,
    connection errors): the announcement is retried later by the watcher."""

    def __init__(self, job_id: str, attempts: int, reason: str) -> None:
        super().__init__(f"callback of job {job_id!r} failed {attempts} time(s): {reason}")
        self.job_id = job_id
        self.attempts = attempts
        self.reason = reason
