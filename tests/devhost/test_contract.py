"""The Python worker's invocation contract, as devhost keeps it (issue 8 §2, issue 13 §2).

Every function of the app runs through devhost's invocation path (binding built as the worker
builds it, the worker's return rule and `$return` encoding); sample apps that break a rule fail
with the worker's own message.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import azure.functions as func
import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.functions import meta
from azure.functions.timer import TimerRequest
from azure.storage.queue import QueueClient
from blobsingleton import BlobLease
from devhost_testkit import Shipped, wait_for

from devhost import invocation
from devhost.blob_listener import bind_blob
from devhost.indexing import IndexedFunction, IndexingError, find_app, load_functions
from devhost.invocation import WorkerRuntime, invoke, thread_pool_size
from devhost.log_levels import HostLogLevelFilter, level_for
from devhost.queue_listener import bind_queue_message
from tests.support import forget_indexing

APPS = Path(__file__).resolve().parent / "apps"
APP_ROOT = Path(__file__).resolve().parents[2]


def queue_delivery(body: bytes, dequeue_count: int = 1) -> SimpleNamespace:
    """What the queue service hands the host for one delivery."""
    now = datetime.now(UTC).replace(microsecond=0)
    return SimpleNamespace(
        id=str(uuid.uuid4()),
        dequeue_count=dequeue_count,
        inserted_on=now,
        expires_on=now + timedelta(days=7),
        next_visible_on=now + timedelta(minutes=10),
        pop_receipt="receipt-1",
    )


def run(function: IndexedFunction, value: Any) -> Any:
    """One invocation through devhost's path (the worker's runtime of this process)."""
    return invoke(function.user_function, {function.arg_name: value}, function_name=function.name)


def run_queue(function: IndexedFunction, body: bytes) -> Any:
    return run(function, bind_queue_message(queue_delivery(body), body))


def http_request(method: str, url: str, body: bytes = b"", **route: str) -> func.HttpRequest:
    return func.HttpRequest(method, url, headers={}, params={}, route_params=route, body=body)


def timer_request(past_due: bool = False) -> TimerRequest:
    now = datetime.now(UTC).isoformat()
    status = {"Last": now, "Next": now, "LastUpdated": now}
    return TimerRequest(past_due=past_due, schedule_status=status, schedule={"AdjustForDST": True})


_indexed: dict[str, dict[str, IndexedFunction]] = {}


def indexed(module: str, app_dir: Path = APPS) -> dict[str, IndexedFunction]:
    """The app's functions by name, indexed once per process as the worker indexes once."""
    if module not in _indexed:
        if module in sys.modules:  # another test indexed it: start as a fresh worker would
            forget_indexing(find_app(sys.modules[module]))
        _indexed[module] = {f.name: f for f in load_functions(module, app_dir)}
    return _indexed[module]


@pytest.fixture
def app_settings(connection_string: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    run_id = uuid.uuid4().hex[:8]
    values = {
        "AzureWebJobsStorage": connection_string,
        "NOTIFICATIONS_QUEUE": f"notify-{run_id}",
        "EMAIL_FROM": "notifications@example.com",
        "EMAIL_OUTBOX_CONTAINER": f"outbox-{run_id}",
        "SENDGRID_API_KEY": "",
        "LEASE_CONTAINER": f"locks-{run_id}",
        "RUNONCE_CONTAINER": f"runonce-{run_id}",
        "JOBS_CONTAINER": f"jobs-{run_id}",
        "JOB_UNITS_QUEUE": f"units-{run_id}",
        "JOB_WATCH_SCHEDULE": "*/30 * * * * *",
        "JOB_UNIT_HANDLER": "shared.jobs.handlers:echo",
        "IMPORT_SCHEDULE": "0 0 2 * * *",
        "IMPORT_QUEUE": f"imports-{run_id}",
        "IMPORTS_CONTAINER": f"imports-{run_id}",
        "MEMBERS_TABLE": f"Members{run_id}",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


def poison_bodies(connection_string: str, queue: str) -> list[bytes]:
    client = QueueClient.from_connection_string(connection_string, f"{queue}-poison")
    with client:
        return [base64.b64decode(m.content) for m in client.peek_messages(max_messages=32)]


def poisoned(storage: Any, queue: str) -> list[bytes]:
    try:
        return list(storage.peek_bodies(f"{queue}-poison"))
    except ResourceNotFoundError:
        return []


# --- the app: every function through the worker's path ---------------------------------


def test_every_function_of_the_app_runs_through_the_workers_invocation_path(
    app_settings: dict[str, str], connection_string: str
) -> None:
    functions = indexed("function_app", APP_ROOT)
    queue_and_timer = {
        "send_notification", "run_job_unit", "fail_job_unit", "announce_job", "import_account",
        "watch_jobs", "nightly_import",
    }  # fmt: skip
    base = "http://localhost/api"
    http = {
        "start_job": http_request("POST", f"{base}/jobs", b"not json"),
        "get_job": http_request("GET", f"{base}/jobs/nope", job_id="nope"),
        "run_import_now": http_request("POST", f"{base}/imports/../run", account="../"),
        "run_nightly_now": http_request("POST", f"{base}/imports/nightly"),
        "ops_locks": http_request("GET", f"{base}/locks"),
        "ops_runs": http_request("GET", f"{base}/runs"),
        "ops_jobs": http_request("GET", f"{base}/jobs"),
        "ops_imports": http_request("GET", f"{base}/imports"),
        "ops_summary_last_hour": http_request("GET", f"{base}/summary"),
        "ops_timers": http_request("GET", f"{base}/timers"),
        "ops_overview": http_request("GET", f"{base}/overview"),
        "ops_status_page": http_request("GET", f"{base}/status"),
        "ops_status_asset": http_request("GET", f"{base}/status/x", asset="x"),
        "ops_break_lock": http_request("POST", f"{base}/locks/x/break", b"{}", key="/bad"),
        "ops_reset_run": http_request("POST", f"{base}/runs/x/reset", b"{}", key="/bad"),
    }
    blob = {"import_arrival"}
    assert set(functions) == queue_and_timer | set(http) | blob  # a new function needs a case
    notification = {
        "event_id": f"contract-{uuid.uuid4().hex[:8]}",
        "type": "contract.check",
        "to": "ada@example.com",
        "subject": "contract",
        "text": "hello",
    }
    # Queue and timer functions have no $return binding: each must return None.
    assert run_queue(functions["send_notification"], json.dumps(notification).encode()) is None
    assert run_queue(functions["send_notification"], b"not json") is None  # poisoned at once
    assert run_queue(functions["run_job_unit"], b"{}") is None
    assert run_queue(functions["fail_job_unit"], b"{}") is None
    assert run_queue(functions["announce_job"], b"{}") is None
    assert run_queue(functions["import_account"], b"{}") is None
    assert run(functions["watch_jobs"], timer_request()) is None
    assert run(functions["nightly_import"], timer_request()) is None
    assert run(functions["nightly_import"], timer_request(past_due=True)) is None  # stored run
    # A blob trigger (Event Grid source): an InputStream from the worker's converter.
    outside = {"BlobTrigger": meta.Datum("imports/acme/reports/r/report.json", "string")}
    assert run(functions["import_arrival"], bind_blob(b"{}", outside)) is None
    # HTTP functions: the $return value goes through the worker's http converter.
    for name, request in http.items():
        datum = run(functions[name], request)
        assert datum.type == "http", name
    assert int(run(functions["get_job"], http["get_job"]).value["status_code"].value) == 404


def test_the_apps_functions_report_the_folder_of_the_file_that_defines_them() -> None:
    """The worker's function_directory: the folder of `inspect.getfile` of the registered
    callable, which the library's decorators now file under the app's source."""
    functions = indexed("function_app", APP_ROOT).values()
    directories = {f.contract.directory for f in functions if f.contract}
    assert directories == {str(APP_ROOT / "functions")}


# --- deliberately wrong apps fail with the worker's message -----------------------------


def test_a_value_returned_without_a_return_binding_fails_with_the_workers_message() -> None:
    functions = indexed("wrong_return_app")
    with pytest.raises(RuntimeError) as queue_error:
        run_queue(functions["queue_returns_value"], b"hello")
    assert str(queue_error.value) == (
        "function 'queue_returns_value' without a $return bindingreturned a non-None value"
    )
    with pytest.raises(RuntimeError, match="'timer_returns_value' without a \\$return binding"):
        run(functions["timer_returns_value"], timer_request())


def test_an_http_function_returning_a_dict_or_none_fails_as_in_the_worker() -> None:
    functions = indexed("wrong_return_app")
    request = http_request("GET", "http://localhost/api/dict")
    with pytest.raises(TypeError) as dict_error:
        run(functions["http_returns_dict"], request)
    assert str(dict_error.value).startswith(
        'unable to encode outgoing TypedData: unsupported type "'
    )
    assert str(dict_error.value).endswith('for Python type "dict"')
    with pytest.raises(TypeError, match='Python type "NoneType"'):
        run(functions["http_returns_none"], request)
    datum = run(functions["http_returns_str"], request)
    assert (datum.type, datum.value) == ("string", "plain text")


def test_an_http_function_annotated_dict_fails_to_load_as_in_the_worker() -> None:
    with pytest.raises(IndexingError) as error:
        load_functions("annotated_dict_app", APPS)
    assert str(error.value) == (
        'cannot load the annotated_dict function: Python return annotation "dict" does not '
        'match binding type "http"'
    )


# --- thread pool, event loop, context ---------------------------------------------------


def test_the_sync_thread_pool_is_sized_by_python_threadpool_thread_count() -> None:
    assert thread_pool_size({"PYTHON_THREADPOOL_THREAD_COUNT": "3"}) == 3
    assert thread_pool_size({}) is None  # Python's default (3.9+: the worker sets no limit)
    assert thread_pool_size({"PYTHON_THREADPOOL_THREAD_COUNT": "0"}) is None
    assert thread_pool_size({"PYTHON_THREADPOOL_THREAD_COUNT": "many"}) is None
    runtime = WorkerRuntime(3)
    try:
        assert runtime.pool._max_workers == 3
    finally:
        runtime.close()
    default = WorkerRuntime(None)
    try:
        assert default.pool._max_workers == min(32, (os.cpu_count() or 1) + 4)
    finally:
        default.close()


def test_context_loop_and_threads_are_the_workers(
    app_settings: dict[str, str], shipped: Shipped
) -> None:
    functions = indexed("invocation_app")
    observed = sys.modules["invocation_app"].OBSERVED
    observed.clear()
    run_queue(functions["sync_observer"], b"one")
    run_queue(functions["async_observer"], b"two")
    run_queue(functions["async_observer"], b"three")
    sync, first_async, second_async = observed
    assert sync["function_name"] == "sync_observer"
    assert sync["function_directory"] == str(APPS)
    assert sync["thread"].startswith("worker-sync")  # the worker's executor, not a host thread
    assert sync["retry"] == (0, 0)
    assert sync["trace_parent"].startswith("00-") and len(sync["trace_parent"]) == 55
    assert sync["trace_parent"].endswith("-01")  # sampled: the host records its activity
    assert len({sync["invocation_id"], first_async["invocation_id"]}) == 2
    assert first_async["loop"] == second_async["loop"]  # one long-lived loop per process
    assert first_async["thread"] == "worker-loop"
    # Records tied to the invocation as the worker ties them; other threads' carry none.
    assert shipped.ids_of("from the function's thread") == [sync["invocation_id"]]
    assert shipped.ids_of("from a thread the function started") == [""]
    assert shipped.ids_of("from the function's task") == [
        first_async["invocation_id"],
        second_async["invocation_id"],
    ]
    assert shipped.ids_of("from asyncio.to_thread") == ["", ""]


def test_the_librarys_wrappers_keep_function_directory_and_invocation_ids(
    app_settings: dict[str, str], shipped: Shipped
) -> None:
    functions = indexed("invocation_app")
    observed = sys.modules["invocation_app"].OBSERVED
    observed.clear()
    body = b"once"
    delivery = queue_delivery(body)
    first = bind_queue_message(delivery, body)
    again = bind_queue_message(delivery, body)  # same message id: @once returns the stored run
    function = functions["async_once_observer"]
    invoke(function.user_function, {"msg": first}, function_name=function.name)
    invoke(function.user_function, {"msg": again}, function_name=function.name)
    run_queue(functions["singleton_observer"], b"lease")
    assert [o["function_directory"] for o in observed] == [str(APPS), str(APPS)]
    stored = [r for r in shipped.records if r.getMessage().startswith("event=replay ")]
    assert len(stored) == 1
    # Logged by the invocation's own task (the library emits there what its threads log).
    assert stored[0].invocation_id  # type: ignore[attr-defined]


def test_an_async_defers_event_record_carries_its_invocation_id(
    app_settings: dict[str, str], shipped: Shipped
) -> None:
    """The deferral runs in a thread; its `event=defer` record (on the library's events
    logger, a child of the one whose records were already captured) is emitted by the task."""
    functions = indexed("invocation_app")
    holder = BlobLease("observed-defer").acquire()
    try:
        run_queue(functions["async_defer_observer"], b"busy")
    finally:
        holder.release()
    deferred = [r for r in shipped.records if r.getMessage().startswith("event=defer ")]
    assert len(deferred) == 1
    assert deferred[0].invocation_id  # type: ignore[attr-defined]


# --- queue trigger metadata as the host builds it (issue 13 §2) ----------------------------


def test_body_fields_override_the_queues_metadata_case_insensitively() -> None:
    body = json.dumps({"id": "x1", "dequeuecount": 7, "other": [1]}).encode()
    delivery = queue_delivery(body, dequeue_count=2)
    message = bind_queue_message(delivery, body)
    assert message.id == "x1"
    assert message.dequeue_count == 7
    assert message.pop_receipt == "receipt-1"
    assert message.insertion_time == delivery.inserted_on
    plain = bind_queue_message(delivery, b"not json")
    assert (plain.id, plain.dequeue_count) == (delivery.id, 2)


@pytest.mark.parametrize(
    "fields",
    [{"DequeueCount": "many"}, {"InsertionTime": "yesterday"}, {"ExpirationTime": [1]}],
)
def test_a_body_breaking_the_metadata_fails_decoding_before_the_function_runs(
    fields: dict[str, Any],
) -> None:
    body = json.dumps(fields).encode()
    with pytest.raises((ValueError, TypeError)):
        bind_queue_message(queue_delivery(body), body)


def test_a_body_overriding_host_metadata_is_poisoned_at_once_with_the_copys_real_id(
    app_settings: dict[str, str], connection_string: str, caplog: pytest.LogCaptureFixture
) -> None:
    functions = indexed("function_app", APP_ROOT)
    body = json.dumps({"id": "x1", "event_id": "e1", "to": "ada@example.com"}).encode()
    with caplog.at_level(logging.WARNING, logger="shared.poison"):
        assert run_queue(functions["send_notification"], body) is None  # one attempt, done
    queue = app_settings["NOTIFICATIONS_QUEUE"]
    assert poison_bodies(connection_string, queue) == [body]
    (line,) = [r.getMessage() for r in caplog.records if r.name == "shared.poison"]
    assert "'x1' (an id its body set; the queue's own id is not available)" in line
    assert "as message " in line and "sets host metadata field(s) Id" in line


# --- log levels -------------------------------------------------------------------------


def test_host_json_log_levels_pick_the_most_specific_category() -> None:
    rules = {"default": "Warning", "Function": "Information", "Function.noisy.User": "Error"}
    assert level_for("Function.quiet.User", rules) == logging.INFO
    assert level_for("Function.noisy.User", rules) == logging.ERROR
    assert level_for("default", {}) == logging.INFO
    with pytest.raises(ValueError, match="not a log level"):
        HostLogLevelFilter({"default": "Loud"})


def test_the_app_quiets_azure_core_http_logging_unless_host_json_raises_it(
    tmp_path: Path,
) -> None:
    from shared.app_logging import HTTP_LOGGING_CATEGORY, configured_level

    assert configured_level(HTTP_LOGGING_CATEGORY, APP_ROOT) == logging.WARNING
    (tmp_path / "host.json").write_text(
        json.dumps({"logging": {"logLevel": {HTTP_LOGGING_CATEGORY.upper(): "Information"}}})
    )
    assert configured_level(HTTP_LOGGING_CATEGORY, tmp_path) == logging.INFO
    import function_app  # noqa: F401 - importing the app applies it

    assert logging.getLogger(HTTP_LOGGING_CATEGORY).getEffectiveLevel() == logging.WARNING


def test_invocation_ids_are_one_runtime_per_process() -> None:
    assert invocation.runtime() is invocation.runtime()


def test_an_undecodable_metadata_override_uses_every_attempt_as_on_azure(
    start_host: Any, base_settings: dict[str, Any], storage: Any, records: Any
) -> None:
    """The worker fails such a message before any app code runs, and the host counts that
    as a failed attempt: it reaches the poison queue after maxDequeueCount, never sooner."""
    settings = {
        **base_settings,
        "AzureFunctionsJobHost__extensions__queues__maxDequeueCount": "2",
    }
    host = start_host(settings)
    queue = settings["SAMPLE_QUEUE"]
    body = json.dumps({"DequeueCount": "many"}).encode()
    storage.queue(queue).send_message(body)
    wait_for(lambda: poisoned(storage, queue) == [body])
    wait_for(lambda: host.totals().failures == {"sample_queue": 2})  # stats lag a report
    assert records.where(function="sample_queue") == []  # the function never ran


def test_invocations_run_in_the_hosts_trace_once_the_workers_distro_is_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Worker 4.34 (devhost/invocation.py): once it configured the Azure Monitor distro
    (PYTHON_ENABLE_OPENTELEMETRY non-empty, and a valid connection string), the current span
    context is the host's traceparent, in the thread (sync) or task (async) that runs the
    function; without it (unset, or the distro failed), there is none, whatever the settings
    say."""
    from opentelemetry import trace

    seen: list[tuple[str, str]] = []

    def current(context: func.Context) -> None:
        span = trace.get_current_span().get_span_context()
        seen.append((context.trace_context.trace_parent.split("-")[1], f"{span.trace_id:032x}"))

    def sync_fn(context: func.Context) -> None:
        current(context)

    async def async_fn(context: func.Context) -> None:
        current(context)

    monkeypatch.setenv("PYTHON_ENABLE_OPENTELEMETRY", "true")
    runtime = WorkerRuntime(1)
    try:
        for configured in (True, False):
            monkeypatch.setattr(invocation, "_azure_monitor_available", configured)
            for fn in (sync_fn, async_fn):
                runtime.call(invocation.FunctionContract.of(fn.__name__, fn, []), fn, {})
    finally:
        runtime.close()
    hosts = [host for host, _ in seen]
    assert len(set(hosts)) == 4  # a traceparent of its own per invocation
    assert [ours == host for host, ours in seen] == [True] * 2 + [False] * 2
    assert {ours for _, ours in seen[2:]} == {"0" * 32}  # no context: the invalid span
