"""The key templates shared by every function that touches an account's import.

One constant each, so the HTTP trigger and the queue trigger can never disagree on the
lease that makes an account's imports one-at-a-time.
"""

from __future__ import annotations

#: The per-account lease (`@singleton`) where the account is a route parameter (HTTP).
LEASE_KEY = "import-{account}"
#: The same lease, read from the validated `ImportRequest` a queue function was given.
REQUEST_LEASE_KEY = "import-{request.account}"
#: The run-once key of one run of one account (for the nightly run, run_id is the run date),
#: from the validated request.
RUN_KEY = "import-{request.account}-{request.run_id}"
#: The run-once key of a file version's arrival (`shared.imports.arrivals.version_of`: a
#: digest of the blob's name and ETag), so one version starts one run however often its
#: event is delivered.
ARRIVAL_KEY = "import-file-{account}-{version}"
#: The run-once key of the nightly fan-out: one per schedule occurrence, on every instance.
NIGHTLY_KEY = "nightly-import-{occurrence}"


def summary_event_id(account: str, run_id: str) -> str:
    """The notification event id of a run's summary email (one email per account per run)."""
    return f"import-{account}-{run_id}"
