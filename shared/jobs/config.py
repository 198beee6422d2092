"""The batch-job app settings, with their defaults, read once per use from the environment.

JOBS_CONTAINER            container of job records, unit markers and archives ("jobs")
JOB_UNITS_QUEUE           queue of unit messages ("job-units"; poison: "job-units-poison")
JOB_MAX_UNITS             most units one job may have (10000)
JOB_UNIT_HANDLER          "module:function" doing a unit's work ("shared.jobs.handlers:echo")
JOB_STALL_SECONDS         a counter that lags and has not moved this long is reconciled (60)
JOB_CALLBACK_TIMEOUT      wall-clock seconds of one callback attempt, from resolving the
                          name to the answer's headers (10)
JOB_CALLBACK_ATTEMPTS     attempts per announcement before the watcher takes over (5)
JOB_CALLBACK_DEADLINE     wall-clock seconds of one announcement: every attempt and the
                          waits between them (60)
JOB_CALLBACK_GIVE_UP_HOURS  an announcement still failing after this is abandoned (24)
JOB_CALLBACK_ALLOWED_NETWORKS, JOB_CALLBACK_ALLOW_HTTP   see shared.jobs.callback_url
JOB_DEFINITIONS_CONTAINER container of job definitions submitted by reference
                          ("job-definitions"; see shared.jobs.definitions)
JOB_WATCH_SCHEDULE        the watcher's NCRONTAB schedule ("*/30 * * * * *"; binding only)

Announcements the watcher or a zero-unit submission hands on go to the queue
"{JOB_UNITS_QUEUE}-announce" (its poison queue: "{JOB_UNITS_QUEUE}-announce-poison").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.jobs.callback_url import CallbackPolicy
from shared.settings import number_setting, setting, whole_setting

DEFAULT_CONTAINER = "jobs"
DEFAULT_QUEUE = "job-units"
DEFAULT_MAX_UNITS = 10_000
DEFAULT_HANDLER = "shared.jobs.handlers:echo"
DEFAULT_DEFINITIONS_CONTAINER = "job-definitions"

#: Backoff between callback attempts: BASE * 2**n seconds with jitter, at most CAP.
BACKOFF_BASE = 0.5
BACKOFF_CAP = 8.0


@dataclass(frozen=True)
class JobSettings:
    container: str = DEFAULT_CONTAINER
    queue: str = DEFAULT_QUEUE
    max_units: int = DEFAULT_MAX_UNITS
    handler: str = DEFAULT_HANDLER
    stall_seconds: float = 60.0
    callback_timeout: float = 10.0
    callback_attempts: int = 5
    callback_deadline: float = 60.0
    give_up_seconds: float = 24 * 3600.0
    callback_policy: CallbackPolicy = field(default_factory=CallbackPolicy)
    definitions_container: str = DEFAULT_DEFINITIONS_CONTAINER
    connection: str = "AzureWebJobsStorage"

    @classmethod
    def from_env(cls) -> JobSettings:
        return cls(
            container=setting("JOBS_CONTAINER", DEFAULT_CONTAINER) or DEFAULT_CONTAINER,
            queue=(setting("JOB_UNITS_QUEUE", DEFAULT_QUEUE) or DEFAULT_QUEUE).lower(),
            max_units=whole_setting("JOB_MAX_UNITS", DEFAULT_MAX_UNITS, 0),
            handler=setting("JOB_UNIT_HANDLER", DEFAULT_HANDLER) or DEFAULT_HANDLER,
            stall_seconds=number_setting("JOB_STALL_SECONDS", 60.0, 0.0),
            callback_timeout=number_setting("JOB_CALLBACK_TIMEOUT", 10.0, 0.1),
            callback_attempts=whole_setting("JOB_CALLBACK_ATTEMPTS", 5, 1),
            callback_deadline=number_setting("JOB_CALLBACK_DEADLINE", 60.0, 0.1),
            give_up_seconds=number_setting("JOB_CALLBACK_GIVE_UP_HOURS", 24.0, 0.0) * 3600.0,
            callback_policy=CallbackPolicy.from_env(),
            definitions_container=setting("JOB_DEFINITIONS_CONTAINER")
            or DEFAULT_DEFINITIONS_CONTAINER,
        )

    @property
    def poison_queue(self) -> str:
        return f"{self.queue}-poison"

    @property
    def announce_queue(self) -> str:
        return f"{self.queue}-announce"

    @property
    def announcement_budget(self) -> float:
        """The longest one announcement can take: its deadline, or less when the attempts
        and their waits end sooner (Retry-After may ask for the cap)."""
        attempts = self.callback_attempts * self.callback_timeout
        waits = (self.callback_attempts - 1) * BACKOFF_CAP
        return min(self.callback_deadline, attempts + waits)

    @property
    def announce_in_progress_timeout(self) -> float:
        """How long a started announcement is presumed alive: longer than the most it can
        take, so only a crashed announcer is ever taken over (see shared.jobs.announce)."""
        return self.announcement_budget + 10.0
