"""@singleton on v2 functions, against a real Azurite. Where a test holds the key through a
`BlobLease` (the app's), the function shares it (`scope="app"`)."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

import azure.functions as func
import pytest
from azure.functions.timer import TimerRequest
from blobsingleton import (
    BlobLease,
    Busy,
    BusyPolicy,
    LeaseLost,
    LeaseTimeout,
    current_lease,
    singleton,
)
from blobsingleton._keys import KeyTemplateError
from blobsingleton.leases import read_lock
from libsupport import queue_client, request_counter


def message(body: dict[str, object]) -> func.QueueMessage:
    return func.QueueMessage(id="m", body=json.dumps(body).encode())


def test_indexing_keeps_signature_and_coroutine_ness() -> None:
    app = func.FunctionApp()

    @app.queue_trigger(arg_name="msg", queue_name="q", connection="AzureWebJobsStorage")
    @singleton("import-{account}")
    def sync_fn(msg: func.QueueMessage) -> None: ...

    @app.route(route="run/{account}", methods=["POST"])
    @singleton("import-{account}")
    async def async_fn(req: func.HttpRequest) -> func.HttpResponse:
        return func.HttpResponse("x")

    functions = {f.get_function_name(): f for f in app.get_functions()}
    assert set(functions) == {"sync_fn", "async_fn"}
    assert inspect.iscoroutinefunction(functions["async_fn"].get_user_function())
    assert not inspect.iscoroutinefunction(functions["sync_fn"].get_user_function())
    bindings = json.loads(functions["sync_fn"].get_function_json())["bindings"]
    assert bindings[0]["type"] == "queueTrigger" and bindings[0]["name"] == "msg"
    assert list(inspect.signature(functions["async_fn"].get_user_function()).parameters) == ["req"]


def test_scope_from_queue_body_holds_the_lease_with_a_token(storage_env: str) -> None:
    @singleton("import-{account}", scope="app")
    def work(msg: func.QueueMessage) -> tuple[str, int, bool]:
        lease = current_lease()
        state = read_lock("import-A")
        return lease.key, lease.token, bool(state and state.leased)

    key, token, leased = work(message({"account": "A"}))
    assert (key, leased) == ("import-A", True)
    assert token >= 1
    state = read_lock("import-A")
    assert state is not None and not state.leased  # released after the function


def test_one_at_a_time_per_scope_in_parallel_across_scopes(storage_env: str) -> None:
    @singleton("region-{region}", busy=Busy.SKIP, scope="app")
    def work(msg: func.QueueMessage) -> str:
        return "ran"

    with BlobLease("region-East"):
        assert work(message({"region": "East"})) is None  # busy: skipped
        assert work(message({"region": "West"})) == "ran"  # other scope: runs


def test_wait_gives_up_with_lease_timeout_so_the_host_retries(storage_env: str) -> None:
    @singleton("wait-{id}", busy=Busy.wait(timeout=1.0), scope="app")
    def work(msg: func.QueueMessage) -> None:
        raise AssertionError("must not run")

    with BlobLease("wait-1"), pytest.raises(LeaseTimeout):
        work(message({"id": 1}))


def test_defer_requeues_a_delayed_copy(storage_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"sdefer-{os.environ['LEASE_CONTAINER'][-10:]}"
    monkeypatch.setenv("SINGLETON_TEST_QUEUE", name)
    client = queue_client(name)
    client.create_queue()

    @singleton(
        "defer-{id}",
        busy=Busy.defer(queue="%SINGLETON_TEST_QUEUE%", after=1),
        scope="app",
    )
    def work(msg: func.QueueMessage) -> None:
        raise AssertionError("must not run")

    original = message({"id": 7})
    with BlobLease("defer-7"):
        assert work(original) is None
    time.sleep(1.5)
    assert [m.content for m in client.receive_messages()] == [original.get_body()]


def test_defer_that_can_never_find_its_message_fails_at_indexing() -> None:
    """A function that does not take the message it would re-enqueue: refused when the worker
    indexes the app, whatever its settings, instead of failing every busy delivery at once
    and burning its dequeue count."""
    with pytest.raises(TypeError, match=r"pass the func\.QueueMessage"):

        @singleton("defer-{id}", busy=Busy.defer(queue="anything"))
        def work(id: int) -> None: ...


def test_defer_without_its_message_at_run_time_waits_instead_of_failing(
    storage_env: str,
) -> None:
    ran: list[object] = []

    @singleton("defer-{id}", busy=Busy.defer(queue="anything"), scope="app")
    def work(id):  # type: ignore[no-untyped-def]  # unannotated: only the call can tell
        ran.append(id)

    holder = BlobLease("defer-9").acquire()
    threading.Timer(1.0, holder.release).start()
    started = time.monotonic()
    work(9)  # no message to re-enqueue: it waits for the key, as WAIT does
    assert ran == [9] and 0.5 < time.monotonic() - started < 10


def test_http_route_param_and_busy_callable_gives_409(storage_env: str) -> None:
    def conflict(error: Exception) -> func.HttpResponse:
        return func.HttpResponse(json.dumps({"error": str(error)}), status_code=409)

    @singleton("import-{account}", busy=conflict, scope="app")
    def run(req: func.HttpRequest) -> func.HttpResponse:
        return func.HttpResponse(str(current_lease().token), status_code=202)

    def request() -> func.HttpRequest:
        return func.HttpRequest(
            "POST", "/api/imports/B/run", body=b"", route_params={"account": "B"}
        )

    assert run(request()).status_code == 202
    with BlobLease("import-B"):
        assert run(request()).status_code == 409


def test_setting_and_timer_occurrence_in_scope(
    storage_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOB_NAME", "nightly")

    @singleton("%JOB_NAME%-{occurrence}", schedule="0 0 2 * * *")
    def tick(timer: func.TimerRequest) -> str:
        return current_lease().key

    # While the host runs a timer, ScheduleStatus.Next is the occurrence firing now.
    firing = TimerRequest(schedule_status={"Next": "2026-11-22T02:00:00+00:00"})
    assert tick(firing) == "nightly-2026-11-22T02:00:00Z"


def test_missing_template_field_is_a_clear_error(storage_env: str) -> None:
    @singleton("import-{account}")
    def work(msg: func.QueueMessage) -> None: ...

    with pytest.raises(KeyTemplateError, match="account"):
        work(message({"region": "x"}))


def test_async_function_under_lease(storage_env: str) -> None:
    @singleton("async-{id}")
    async def work(msg: func.QueueMessage) -> bool:
        await asyncio.sleep(0)
        return current_lease().is_held

    assert asyncio.run(work(message({"id": 1}))) is True


def test_lost_lease_is_raised_after_the_function(storage_env: str) -> None:
    from azure.storage.blob import BlobLeaseClient
    from libsupport import blob_service

    @singleton("lost-{id}")
    def work(msg: func.QueueMessage) -> None:
        container = blob_service().get_container_client(os.environ["LEASE_CONTAINER"])
        BlobLeaseClient(container.get_blob_client(current_lease().name)).break_lease(
            lease_break_period=0
        )
        assert current_lease().lost.wait(10)

    with pytest.raises(LeaseLost):
        work(message({"id": 1}))


@pytest.mark.parametrize(
    ("busy", "right_after"),
    [(Busy.skip(), 3), (Busy.wait(), 4)],  # wait: a turn right after looks for a line (+1)
)
def test_an_uncontended_call_is_acquire_token_release(
    storage_env: str, busy: BusyPolicy, right_after: int
) -> None:
    def decorated() -> Callable[[func.QueueMessage], None]:
        @singleton("cost-{id}", busy=busy)
        def work(msg: func.QueueMessage) -> None: ...

        return work

    decorated()(message({"id": 1}))  # the lock blob exists from now on
    work = decorated()  # a fresh function: nothing remembered of the key's line
    request_counter.reset()
    work(message({"id": 1}))
    assert request_counter.total() == 3  # Acquire Lease, the token, Release Lease: no listing
    # Released a moment ago, the key may have a line that could not take it in between: under
    # wait the next release lists it (and hands the key to its first), under skip it does not.
    request_counter.reset()
    work(message({"id": 1}))
    assert request_counter.total() == right_after


def test_current_lease_outside_is_an_error() -> None:
    with pytest.raises(LookupError):
        current_lease()


def test_defer_without_queue_is_refused_at_decoration() -> None:
    with pytest.raises(ValueError, match=r"busy=Busy\.defer\(queue="):
        singleton("x", busy=Busy.DEFER)


def test_occurrence_is_the_firing_one_on_every_instance_however_late() -> None:
    from blobsingleton._keys import _occurrence

    nightly = "0 0 2 * * *"
    status = {"Next": "2026-11-22T02:00:00Z"}  # the host's status during tonight's run
    on_time = datetime(2026, 11, 22, 2, 0, 0, 300_000, tzinfo=UTC)
    late = datetime(2026, 11, 22, 5, 0, tzinfo=UTC)  # a past-due catch-up hours later
    assert _occurrence("t", TimerRequest(schedule_status=status), nightly, on_time) == (
        "2026-11-22T02:00:00Z"
    )
    assert _occurrence("t", TimerRequest(past_due=True, schedule_status=status), nightly, late) == (
        "2026-11-22T02:00:00Z"
    )


def test_first_night_without_status_and_next_night_get_different_keys() -> None:
    """Regression: reading Next as "the occurrence after this one" gave night 2 night 1's key."""
    from blobsingleton._keys import _occurrence

    nightly = "0 0 2 * * *"
    first = _occurrence("t", TimerRequest(), nightly, datetime(2026, 11, 22, 2, 0, 1, tzinfo=UTC))
    second = _occurrence(
        "t",
        TimerRequest(schedule_status={"Next": "2026-11-23T02:00:00Z"}),
        nightly,
        datetime(2026, 11, 23, 2, 0, 1, tzinfo=UTC),
    )
    assert (first, second) == ("2026-11-22T02:00:00Z", "2026-11-23T02:00:00Z")


def test_status_written_under_another_schedule_is_ignored() -> None:
    from blobsingleton._keys import _occurrence

    stale = TimerRequest(schedule_status={"Next": "2026-12-25T02:00:00Z"})
    now = datetime(2026, 11, 22, 2, 0, 3, tzinfo=UTC)
    assert _occurrence("t", stale, "0 0 2 * * *", now) == "2026-11-22T02:00:00Z"
