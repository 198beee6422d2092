"""Storage answering as Azure does under load, against Azurite, through the public API.

Azure Storage documents three answers every client meets at scale: `503 ServerBusy` (the
request was not carried out), `500 OperationTimedOut` and `500 InternalError` (it may or may
not have completed); a connection can also break after the request landed. `AzureUnderLoad`
(libsupport) is the real transport to the real Azurite, answering the requests armed for it as
the service does: a 503 without sending the request, a 500 after the request landed (its real
answer dropped), with the service's XML error body and `x-ms-error-code`, so the SDK parses it
as Azure's. The SDK's retry back-offs are recorded and not slept: the tests run fast, and the
retry budget of the library's own clients is measured, not waited for.

A write that landed meets its own first copy when the client sends it again. A run must find
out: its claim, heartbeat, completion and free are known as its own by the record's claim id,
a rival's write is still a conflict, a completion storage keeps refusing is tried again while
the claim can live, and the work never starts on a claim whose record could have expired.
Leases: an acquire, fence, renewal or release answered 500 after it landed leaves the lease as
it should be.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any

import pytest
from azure.core.pipeline.transport import HttpTransport
from azure.storage.blob import BlobServiceClient
from blobsingleton import BlobLease, Busy, StorageAccount, once
from blobsingleton._once_handler import Decision, OnceHandler
from blobsingleton.errors import RunLost, StorageUnavailable
from blobsingleton.records import BlobRecordStore, Record, Status
from libsupport import LOST, AzureUnderLoad, fence, lease_action, record_write


@pytest.fixture
def load(storage_env: str, monkeypatch: pytest.MonkeyPatch) -> AzureUnderLoad:
    """The transport, and every SDK retry back-off in this test recorded instead of slept
    (the SDK sleeps through `HttpTransport.sleep` of the client's transport, or of the
    wrapper a child client puts around it)."""
    transport = AzureUnderLoad()
    monkeypatch.setattr(HttpTransport, "sleep", lambda self, duration: transport.sleep(duration))
    return transport


@pytest.fixture
def account(storage_env: str, load: AzureUnderLoad) -> StorageAccount:
    """The account as the library builds its clients, through `load`."""
    return StorageAccount(connection_string=storage_env, client_options={"transport": load})


@pytest.fixture
def container_name(account: StorageAccount) -> str:
    name = f"errors-{uuid.uuid4().hex[:10]}"
    account.blob_service().create_container(name)
    return name


@pytest.fixture
def store(account: StorageAccount, container_name: str) -> BlobRecordStore:
    container = account.blob_service().get_container_client(container_name)
    return BlobRecordStore(container=container, namespace="errors")


def rival_store(storage_env: str, container_name: str) -> BlobRecordStore:
    """Another writer of the same records, straight to Azurite (never faulted)."""
    container = BlobServiceClient.from_connection_string(storage_env).get_container_client(
        container_name
    )
    return BlobRecordStore(container=container, namespace="errors")


def claim(key: str, owner: str = "me") -> Record:
    return Record(key=key, status=Status.IN_PROGRESS, started_at=1.0, expires_at=2.0,
                  owner=owner, ttl=60.0)  # fmt: skip


def run(store: BlobRecordStore, key: str = "job") -> OnceHandler:
    """A delivery whose heartbeat the test drives (`_beat_step`)."""
    handler = OnceHandler(store, key, in_progress_timeout=60.0)
    handler._start_beating = lambda: None  # type: ignore[method-assign]
    return handler


def duplicate(storage_env: str, container_name: str, key: str = "job") -> Any:
    return run(rival_store(storage_env, container_name), key).begin()


# -- run-once records: one delivery's own writes -------------------------------------------


@pytest.mark.parametrize("kind", LOST)
def test_a_claim_answered_500_after_it_landed_is_this_runs_own(
    store: BlobRecordStore, load: AzureUnderLoad, storage_env: str, container_name: str,
    kind: str,
) -> None:  # fmt: skip
    load.arm(kind, record_write("job"))
    claimed = run(store).begin()  # the create landed; its copy met BlobAlreadyExists
    assert claimed.decision == Decision.EXECUTE and load.answered[kind] == 1
    stored = rival_store(storage_env, container_name).get("job")
    assert stored is not None and claimed.record.etag == stored.etag  # the next write's etag
    assert duplicate(storage_env, container_name).decision == Decision.BUSY


def test_a_claim_answered_503_is_sent_again_and_made(
    store: BlobRecordStore, load: AzureUnderLoad
) -> None:
    load.arm("server_busy", record_write("job"))
    assert run(store).begin().decision == Decision.EXECUTE
    assert load.answered["server_busy"] == 1


@pytest.mark.parametrize("kind", LOST)
def test_a_heartbeat_answered_500_after_it_landed_keeps_the_key(
    store: BlobRecordStore, load: AzureUnderLoad, storage_env: str, container_name: str,
    kind: str,
) -> None:  # fmt: skip
    handler = run(store)
    assert handler.begin().decision == Decision.EXECUTE
    load.arm(kind, record_write("job"))
    assert handler._beat_step()  # landed; its copy met 412: read back, its own
    assert not handler.lost.is_set()
    handler.ensure_held()
    assert handler._beat_step()  # the next beat goes on from the landed one's etag
    handler.complete("sent")
    outcome = duplicate(storage_env, container_name)
    assert outcome.decision == Decision.STORED and outcome.record.result == "sent"


@pytest.mark.parametrize("kind", LOST)
def test_a_completion_answered_500_after_it_landed_is_done(
    store: BlobRecordStore, load: AzureUnderLoad, storage_env: str, container_name: str,
    kind: str,
) -> None:  # fmt: skip
    handler = run(store)
    assert handler.begin().decision == Decision.EXECUTE
    load.arm(kind, record_write("job"))
    handler.complete("sent")
    outcome = duplicate(storage_env, container_name)
    assert outcome.decision == Decision.STORED and outcome.record.result == "sent"


def test_a_completion_that_never_lands_is_raised_not_taken_for_done(
    store: BlobRecordStore, load: AzureUnderLoad, storage_env: str, container_name: str
) -> None:
    handler = run(store)
    assert handler.begin().decision == Decision.EXECUTE
    load.arm("server_busy", record_write("job"), times=100)
    with pytest.raises(StorageUnavailable):
        handler.complete("sent")
    assert duplicate(storage_env, container_name).decision == Decision.BUSY  # still its claim


@pytest.mark.parametrize("kind", LOST)
def test_a_free_answered_500_after_it_landed_is_done(
    store: BlobRecordStore, load: AzureUnderLoad, storage_env: str, container_name: str,
    kind: str,
) -> None:  # fmt: skip
    handler = run(store)
    assert handler.begin().decision == Decision.EXECUTE
    load.arm(kind, record_write("job"))
    handler.fail()  # the delete landed; its copy met BlobNotFound
    assert rival_store(storage_env, container_name).get("job") is None


def test_a_rivals_claim_between_a_503_and_its_retry_is_still_a_conflict(
    store: BlobRecordStore, load: AzureUnderLoad, storage_env: str, container_name: str
) -> None:
    rival = rival_store(storage_env, container_name)

    def rival_gets_in(request: Any) -> bool:
        if not record_write("job")(request):
            return False
        # (written straight to its blob: the transport's lock is held while this runs)
        rival.put_if_absent(claim("job", owner="rival").with_(claim="rival's"))
        return True

    load.arm("server_busy", rival_gets_in)
    outcome = run(store).begin()
    assert outcome.decision == Decision.BUSY and outcome.record.claim == "rival's"


def test_a_conflict_at_the_first_attempt_costs_one_read(
    storage_env: str, container_name: str
) -> None:
    from blobsingleton.testing import RequestCounter

    counter = RequestCounter()
    client = BlobServiceClient.from_connection_string(storage_env, raw_request_hook=counter)
    counted = BlobRecordStore(client.get_container_client(container_name), namespace="errors")
    counted.put_if_absent(
        Record(key="warm", status=Status.COMPLETED, started_at=1, expires_at=2, ttl=60)
    )
    # A look through the watcher makes it: the process's watcher of these records (one per
    # container and prefix, made on first use) then reads through this counted client.
    assert counted.get_many(["warm"])["warm"] is not None
    assert run(rival_store(storage_env, container_name)).begin().decision == Decision.EXECUTE
    counter.reset()
    assert run(counted).begin().decision == Decision.BUSY
    assert counter.by_method() == {"PUT": 1, "GET": 1}  # the create, then what is there


# -- run-once records: what a decorated function sees ---------------------------------------


@pytest.mark.parametrize("kind", [*LOST, "server_busy"])
def test_a_completion_answered_with_an_error_runs_the_work_once(
    store: BlobRecordStore, load: AzureUnderLoad, kind: str
) -> None:
    runs: list[str] = []

    @once("job-{name}", storage=store, in_progress_timeout=30.0)
    def work(name: str) -> str:
        runs.append(name)
        return f"done {name}"

    key = f"job-{uuid.uuid4().hex[:6]}"
    name = key.removeprefix("job-")
    assert work(name) == f"done {name}"  # its claim, and nothing armed yet
    assert work(name) == f"done {name}" and runs == [name]
    other = f"o{uuid.uuid4().hex[:6]}"
    load.arm(kind, record_write(f"job-{other}"), times=2)  # the claim and the completion
    assert work(other) == f"done {other}"
    assert load.armed() == 0
    assert work(other) == f"done {other}"  # the stored result: not run again
    assert runs == [name, other]


def test_the_work_never_starts_on_a_claim_whose_record_has_expired(
    store: BlobRecordStore, load: AzureUnderLoad, storage_env: str, container_name: str
) -> None:
    reader = rival_store(storage_env, container_name)
    name = uuid.uuid4().hex[:6]
    alive_at_start: list[bool] = []

    @once("late-{name}", storage=store, in_progress_timeout=2.0, busy=Busy.wait(timeout=0.0))
    def work(name: str) -> str:
        record = reader.get(f"late-{name}")  # as storage has it when the work starts
        alive_at_start.append(record is not None and not record.expired())
        return name

    # The record lands; storage's 500 comes back after the record's 2 s: the SDK sends the
    # create again, meets its own record, and the store knows it as ours. Any copy reading
    # the record now finds it expired and takes it over: the work must not start on it
    # (not at all, or only once the claim was confirmed again).
    load.arm("operation_timed_out", record_write(f"late-{name}"), delay=3.0)
    with contextlib.suppress(RunLost):  # (refusing to start is one right answer)
        work(name)
    assert load.answered["operation_timed_out"] == 1
    assert all(alive_at_start), alive_at_start


def test_a_completion_refused_by_every_sdk_attempt_is_still_written(
    store: BlobRecordStore, load: AzureUnderLoad
) -> None:
    runs: list[str] = []

    @once("done-{name}", storage=store, in_progress_timeout=30.0, busy=Busy.wait(timeout=0.0))
    def work(name: str) -> str:
        runs.append(name)
        return name

    name = uuid.uuid4().hex[:6]

    def completion(request: Any) -> bool:
        return record_write(f"done-{name}")(request) and "If-Match" in request.headers

    load.arm("server_busy", completion, times=4)  # the first attempt and three retries
    assert work(name) == name
    assert work(name) == name and runs == [name]  # the stored result


def test_a_heartbeat_whose_outcome_stayed_unknown_does_not_lose_the_run(
    store: BlobRecordStore, load: AzureUnderLoad
) -> None:
    runs: list[str] = []
    name = uuid.uuid4().hex[:6]
    key = f"beat-{name}"

    def beat(request: Any) -> bool:
        return record_write(key)(request) and "If-Match" in request.headers

    @once("beat-{name}", storage=store, in_progress_timeout=1.5, busy=Busy.wait(timeout=0.0))
    def work(name: str) -> str:
        load.arm("internal_error", beat, times=4)  # the first beat lands, every answer 500
        deadline = time.monotonic() + 5.0
        while load.armed() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.2)  # the next beats, from the etag the first one left
        runs.append(name)
        return name

    assert work(name) == name
    assert work(name) == name and runs == [name]  # completed: the stored result


# -- the retry budget of the library's own clients ------------------------------------------


def test_a_record_write_answered_503_is_retried_within_a_heartbeat_interval(
    store: BlobRecordStore, load: AzureUnderLoad
) -> None:
    first = store.put_if_absent(claim("k"))
    load.arm("server_busy", record_write("k"))
    store.replace(first.with_(status=Status.COMPLETED), first.etag or "")
    assert len(load.backoffs) == 1
    assert load.backoffs[0] <= 15.0 / 3  # the default in_progress_timeout / beats per timeout


def test_a_lease_acquire_answered_503_is_retried_within_a_third_of_the_period(
    account: StorageAccount, load: AzureUnderLoad
) -> None:
    lease = BlobLease(f"k-{uuid.uuid4().hex[:6]}", storage=account, namespace="errors")
    load.arm("server_busy", lease_action("acquire"))
    lease.acquire(blocking=False)
    lease.release()
    assert len(load.backoffs) == 1 and load.backoffs[0] <= lease.period / 3


# -- leases -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", LOST)
def test_an_acquire_answered_500_after_it_landed_holds_the_lease(
    account: StorageAccount, load: AzureUnderLoad, kind: str
) -> None:
    key = f"k-{uuid.uuid4().hex[:6]}"
    BlobLease(key, storage=account, namespace="errors").acquire(blocking=False).release()
    load.arm(kind, lease_action("acquire"))
    lease = BlobLease(key, storage=account, namespace="errors").acquire(blocking=False)
    assert load.answered[kind] == 1  # the retry, with our lease id, was accepted
    lease.ensure_held()
    lease.release()


@pytest.mark.parametrize("kind", LOST)
def test_a_fencing_token_answered_500_after_it_landed_is_still_higher(
    account: StorageAccount, load: AzureUnderLoad, kind: str
) -> None:
    key = f"k-{uuid.uuid4().hex[:6]}"
    with BlobLease(key, storage=account, namespace="errors") as earlier:
        before = earlier.token
    load.arm(kind, fence)
    with BlobLease(key, storage=account, namespace="errors") as lease:
        assert load.answered[kind] == 1
        assert lease.token > before  # incremented twice (the SDK's retry): a gap, no reuse
        lease.ensure_held()


@pytest.mark.parametrize("kind", LOST)
def test_a_release_answered_500_after_it_landed_frees_the_key(
    account: StorageAccount, load: AzureUnderLoad, kind: str
) -> None:
    key = f"k-{uuid.uuid4().hex[:6]}"
    lease = BlobLease(key, storage=account, namespace="errors").acquire(blocking=False)
    load.arm(kind, lease_action("release"))
    lease.release()  # the retry meets a free lock: logged, not raised
    assert load.answered[kind] == 1
    BlobLease(key, storage=account, namespace="errors").acquire(blocking=False).release()


@pytest.mark.parametrize("kind", [*LOST, "server_busy"])
def test_a_renewal_answered_with_an_error_keeps_the_lease(
    account: StorageAccount, load: AzureUnderLoad, kind: str
) -> None:
    key = f"k-{uuid.uuid4().hex[:6]}"
    lease = BlobLease(key, storage=account, namespace="errors").acquire(blocking=False)
    load.arm(kind, lease_action("renew"))
    deadline = time.monotonic() + lease.period
    # The first renewal (period / 3); `armed()` drops when a request that lands is sent, before
    # its answer is counted, so a wait on it raced the count on a busy machine.
    while not load.answered[kind] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert load.answered[kind] == 1
    time.sleep(1.5)  # the renewal tried again (at most a second later) and was confirmed
    lease.ensure_held()
    assert not lease.lost.is_set()
    lease.release()
