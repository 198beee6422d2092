"""Helpers for the operations tests: seed locks, run-once records, jobs and import reports,
and the operator identities the API authorises (an operator key, App Service principals)."""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import azure.functions as func
from blobsingleton import BlobLease
from blobsingleton.leases import Owner
from blobsingleton.records import BlobRecordStore, Record, Status

from shared import storage
from shared.imports.report import RunReport
from shared.jobs import JobRequest, JobSettings, JobStore, submit_job
from shared.jobs.callback_url import CallbackPolicy, parse_networks
from shared.operators import key_digest

#: The tests' operator key (OpsEnv puts its SHA-256 in OPS_OPERATOR_KEYS).
OPERATOR_KEY = "test-operator-key-0f3a9c"
AS_OPERATOR = {"X-Operator-Key": OPERATOR_KEY}
OBJECT_ID = "http://schemas.microsoft.com/identity/claims/objectidentifier"


def principal(name: str, *roles: str, object_id: str = "5d1c-77aa") -> dict[str, str]:
    """The `x-ms-client-principal` header App Service authentication would pass for a user."""
    claims = [{"typ": "name", "val": name}, {"typ": OBJECT_ID, "val": object_id}]
    claims += [{"typ": "roles", "val": role} for role in roles]
    data = {"auth_typ": "aad", "claims": claims, "name_typ": "name", "role_typ": "roles"}
    return {"x-ms-client-principal": base64.b64encode(json.dumps(data).encode()).decode()}


@dataclass(frozen=True)
class OpsEnv:
    """The per-test containers and queues the app's settings point at."""

    locks: str
    runs: str
    audit: str
    jobs: str
    units_queue: str
    imports: str
    notes: str = "ops-notes"
    notifications_queue: str = "notifications"
    imports_queue: str = "imports"

    def settings(self) -> dict[str, str | None]:
        return {
            "LEASE_CONTAINER": self.locks,
            "RUNONCE_CONTAINER": self.runs,
            "OPS_AUDIT_CONTAINER": self.audit,
            "JOBS_CONTAINER": self.jobs,
            "JOB_UNITS_QUEUE": self.units_queue,
            "IMPORTS_CONTAINER": self.imports,
            "OPS_NOTES_CONTAINER": self.notes,
            "NOTIFICATIONS_QUEUE": self.notifications_queue,
            "IMPORT_QUEUE": self.imports_queue,
            "OPS_OPERATOR_KEYS": f"tests={key_digest(OPERATOR_KEY)}",
            "OPS_EASY_AUTH": None,
            "WEBSITE_AUTH_ENABLED": None,
        }

    def audit_entries(self) -> list[dict[str, Any]]:
        container = storage.blob_service().get_container_client(self.audit)
        if not container.exists():
            return []
        return [
            json.loads(container.download_blob(b.name).readall()) for b in container.list_blobs()
        ]


def wait_for(predicate: Any, timeout: float = 20.0) -> None:
    """Poll a storage-side condition (there is no event to wait on) until it holds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.2)


def hold_lock(key: str, function: str = "import_account", invocation: str = "inv-1") -> BlobLease:
    """A lease held by this process, its owner record published at once (as a long hold's is)."""
    owner = Owner(function=function, invocation_id=invocation)
    return BlobLease(key, owner=owner, publish_owner_at_acquire=True).acquire(timeout=10)


def put_record(key: str, status: Status, *, expires_in: float = 300.0, result: Any = None,
               scope: str | None = None, attempt: int = 1) -> None:  # fmt: skip
    """A run-once record of the app's (or of function `scope`), as a run `attempt` wrote it."""
    now = time.time()
    record = Record(key, status, now + expires_in, now - 5, result=result, owner="host-7",
                    attempt=attempt)  # fmt: skip
    BlobRecordStore(scope=scope).put_if_absent(record)


def start_job(job_id: str, units: int, callback_url: str = "http://127.0.0.1:9/done") -> None:
    """A job whose units are queued and not yet run: in progress."""
    settings = JobSettings.from_env()
    body = {
        "job_id": job_id,
        "units": [{"id": f"u{i}", "payload": {"n": i}} for i in range(units)],
        "callback_url": callback_url,
    }
    local = CallbackPolicy(parse_networks("127.0.0.0/8", "test"), allow_http=True)
    request = JobRequest.parse(json.dumps(body), max_units=100, policy=local)
    submit_job(request, JobStore(settings))


def write_import_report(account: str, run_id: str, imported: int, rejected: int,
                        reasons: tuple[tuple[int, str], ...] = ()) -> None:  # fmt: skip
    """A completed run's report; `reasons`: rejected rows as (line, reason), kept in its file's
    rejection samples as the import keeps them (with the member id, which views leave out)."""
    report = RunReport(account, run_id, run_id, "nightly", token=4)
    report.finish("completed")
    data = report.to_dict()
    data["totals"].update(records=imported + rejected, imported=imported, rejected=rejected)
    if reasons:
        samples = [{"location": f"members.csv:{line}", "member_id": f"M-{line:04}", "line": line,
                    "reason": reason} for line, reason in reasons]  # fmt: skip
        data["files"] = [{"name": "members.csv", "kind": "csv", "status": "processed",
                          "records": imported + rejected, "imported": imported,
                          "rejected": rejected, "rejections": samples}]  # fmt: skip
    container = storage.blob_service().get_container_client(report_container())
    if not container.exists():
        container.create_container()
    container.upload_blob(f"{account}/reports/{run_id}/report.json", json.dumps(data))


@contextlib.contextmanager
def failing_receiver(status: int = 500) -> Iterator[str]:
    """A callback receiver on 127.0.0.1 that answers every POST with `status`; its URL."""

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/done"
    finally:
        server.shutdown()
        server.server_close()


def fail_callback(job_id: str, url: str) -> None:
    """A job that succeeded whose callback `url` fails for now: its finalizer tries once
    (JOB_CALLBACK_ATTEMPTS=1) and notes the failed try on the outcome, as in production."""
    from shared.jobs.finalize import finalize
    from shared.jobs.records import Completion, JobStatus

    settings = replace(JobSettings.from_env(), callback_attempts=1,
                       callback_policy=CallbackPolicy(parse_networks("127.0.0.0/8", "test"),
                                                      allow_http=True))  # fmt: skip
    store = JobStore(settings)
    start_job(job_id, 3, url)
    now = time.time()
    outcome = Completion(job_id, JobStatus.SUCCEEDED, 3, 0, [], url, now - 120, now - 120,
                         "test")  # fmt: skip
    created, _ = store.create_completion(outcome)
    assert created is not None
    assert finalize(store, created) is None  # not announced: the watcher comes back
    stored = store.read_completion(job_id)
    assert stored is not None and stored.failed_tries is not None


def poison_message(queue: str, reason: str) -> None:
    """A message the app moved to `queue`'s poison queue at once (shared.poison.reject)."""
    from shared.poison import reject

    message = func.QueueMessage(id=f"m-{time.time_ns()}", body=b'{"event_id": 1}')
    reject(message, queue, reason)


def report_container() -> str:
    from shared.imports.layout import container_name

    return container_name()


def call(function: Any, method: str = "GET", route: str = "", *, params: dict[str, str] | None =
         None, route_params: dict[str, str] | None = None, body: Any = None,
         headers: dict[str, str] | None = None) -> tuple[int, Any]:  # fmt: skip
    """Call an HTTP function as the worker does, as the tests' operator unless `headers` say
    who calls; returns status and the parsed JSON body."""
    if headers is None:
        headers = {**AS_OPERATOR, "Content-Type": "application/json"}
    raw = (
        body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else b""
    )
    request = func.HttpRequest(
        method, f"http://localhost/api/{route}", params=params or {},
        route_params=route_params or {}, body=raw, headers=headers,
    )  # fmt: skip
    response = function(request)
    return response.status_code, json.loads(response.get_body() or b"null")
