"""Where a job's blobs live. Ids are user data: validated and percent-encoded by
`blobsingleton`'s key rules, so no id can escape its job's prefix or collide with another id.

    jobs/{job}/job.json             the job record (deleted last when archived)
    jobs/{job}/counter              empty page blob; its sequence number counts finished units
    jobs/{job}/units/{unit}         one marker per finished unit (created once, If-None-Match)
    jobs/{job}/failed/{unit}        index of failed units, so the finalizer lists only those
    jobs/{job}/payloads/{unit}      unit payloads too large for a queue message
    jobs/{job}/completion.json      the outcome; creating it elects the one finalizer
    archive/{job}/job.json          the job record and its outcome after the job finished
"""

from __future__ import annotations

from urllib.parse import unquote

from blobsingleton.config import blob_name, encode_key, validate_key
from blobsingleton.errors import InvalidKey

JOBS_PREFIX = "jobs"
ARCHIVE_PREFIX = "archive"
MAX_ID_LENGTH = 128
#: Blob names are at most 1024 characters; two encoded ids plus the fixed parts fit.
MAX_ENCODED_ID_LENGTH = 480


def validate_id(value: object) -> str:
    """A job or unit id usable in blob names; `InvalidKey` otherwise."""
    key = validate_key(value, max_length=MAX_ID_LENGTH)
    if len(encode_key(key)) > MAX_ENCODED_ID_LENGTH:
        raise InvalidKey(key, "is too long once encoded for a blob name")
    return key


class JobLayout:
    """The blob names of one job."""

    def __init__(self, job_id: str) -> None:
        self.job_id = validate_id(job_id)
        self.prefix = blob_name(JOBS_PREFIX, self.job_id) + "/"

    @property
    def record(self) -> str:
        return self.prefix + "job.json"

    @property
    def counter(self) -> str:
        return self.prefix + "counter"

    @property
    def completion(self) -> str:
        return self.prefix + "completion.json"

    @property
    def units_prefix(self) -> str:
        return self.prefix + "units/"

    @property
    def failed_prefix(self) -> str:
        return self.prefix + "failed/"

    def marker(self, unit_id: str) -> str:
        return blob_name(self.prefix + "units", validate_id(unit_id))

    def failed(self, unit_id: str) -> str:
        return blob_name(self.prefix + "failed", validate_id(unit_id))

    def payload(self, unit_id: str) -> str:
        return blob_name(self.prefix + "payloads", validate_id(unit_id))

    @property
    def archive(self) -> str:
        return blob_name(ARCHIVE_PREFIX, self.job_id) + "/job.json"


def unit_id_of(name: str, prefix: str) -> str:
    """The unit id a marker (or failed-index) blob name under `prefix` stands for."""
    return unquote(name[len(prefix) :])


def job_id_of(prefix: str) -> str | None:
    """The job id of a listed `jobs/{job}/` prefix; None if it is not one this app wrote."""
    head = JOBS_PREFIX + "/"
    if not prefix.startswith(head) or not prefix.endswith("/"):
        return None
    encoded = prefix[len(head) : -1]
    try:
        job_id = validate_id(unquote(encoded))
    except InvalidKey:
        return None
    return job_id if encode_key(job_id) == encoded else None
