"""The patterns users pick instead of this library, replayed with the same SDK on the same storage.

Each alternative guards one unit of work (`work()`, e.g. sending an email) for a key and
answers DONE (the delivery is finished: the work ran, or was skipped) or DEFERRED (come back
later: the harness re-queues the message, as the host would). Their request sequences follow
their sources:

- `webjobs`: WebJobs Function-mode `[Singleton]` (azure-webjobs-sdk SingletonManager and
  BlobLeaseDistributedLockManager): HEAD, Acquire (15 s), HEAD, Set Metadata
  (FunctionInstance), work, Release; renewed every 7.5 s; a busy waiter polls every 5 s and
  then runs the work too (a lock, not a run-once record).
- `tutorial`: the blog-post pattern this project started from: exists check, create if
  missing, acquire a 60 s lease renewed every 50 s, release; a busy worker skips.
- `lease_only`: the "8 workers, 1 email" fix: acquire a 15 s lease or skip; no record, so a
  worker arriving after the holder released sends again.
- `powertools`: AWS Powertools-style idempotency: put-if-absent an INPROGRESS record first,
  read it back on conflict (COMPLETED: skip; INPROGRESS: defer; expired: take over), mark
  COMPLETED after the work.
- `none`: no guard at all.
- `ours`: this library's `@once` (busy: deferred, as `Busy.DEFER` does).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from enum import StrEnum
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.storage.blob import BlobClient, BlobLeaseClient, ContainerClient
from blobsingleton import once
from blobsingleton.records import BlobRecordStore

Work = Callable[[], None]


class Outcome(StrEnum):
    DONE = "done"  # the delivery is finished (work ran, or was skipped)
    DEFERRED = "deferred"  # busy elsewhere: deliver again later


#: Names in the order tables and plots show them.
NAMES = ("ours", "webjobs", "tutorial", "lease_only", "powertools", "none")

WEBJOBS_LOCK_PERIOD = 15.0
WEBJOBS_RENEW_EVERY = 7.5
WEBJOBS_POLL_INTERVAL = 5.0
TUTORIAL_LEASE = 60
TUTORIAL_RENEW_EVERY = 50.0
POWERTOOLS_IN_PROGRESS_EXPIRY = 300.0


@contextlib.contextmanager
def renewing(lease: BlobLeaseClient, every: float) -> Iterator[None]:
    """Renew `lease` every `every` seconds in a thread while the block runs."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every):
            with contextlib.suppress(HttpResponseError):
                lease.renew()

    thread = threading.Thread(target=loop, daemon=True, name="renew")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _create_if_missing(blob: BlobClient) -> None:
    with contextlib.suppress(ResourceExistsError):
        blob.upload_blob(b"", overwrite=False)


def _lease_busy(error: HttpResponseError) -> bool:
    return error.status_code == 409


class WebJobsSingleton:
    """Function-mode `[Singleton]`: waiters poll until they hold the lock, then run too."""

    name = "webjobs"

    def __init__(self, container: ContainerClient, poll_interval: float = WEBJOBS_POLL_INTERVAL):
        self.container = container
        self.poll_interval = poll_interval

    def acquire(self, key: str) -> BlobLeaseClient:
        """HEAD (lock owner), then Acquire until it succeeds, polling every 5 s."""
        blob = self.container.get_blob_client(f"webjobs/{key}")
        try:
            blob.get_blob_properties()
        except ResourceNotFoundError:
            _create_if_missing(blob)
        while True:
            try:
                return blob.acquire_lease(int(WEBJOBS_LOCK_PERIOD))
            except HttpResponseError as error:
                if not _lease_busy(error):
                    raise
            time.sleep(self.poll_interval)

    def mark_owner(self, key: str, lease: BlobLeaseClient) -> None:
        """HEAD, Set Metadata FunctionInstance = invocation id (the lock's owner record)."""
        blob = self.container.get_blob_client(f"webjobs/{key}")
        props = blob.get_blob_properties(lease=lease)
        owner = {**props.metadata, "FunctionInstance": str(uuid.uuid4())}
        blob.set_blob_metadata(owner, lease=lease)

    def handle(self, key: str, work: Work) -> Outcome:
        lease = self.acquire(key)
        try:
            self.mark_owner(key, lease)
            with renewing(lease, WEBJOBS_RENEW_EVERY):
                work()
        finally:
            lease.release()
        return Outcome.DONE


class TutorialPattern:
    """Exists check, create if missing, 60 s lease renewed every 50 s; busy skips."""

    name = "tutorial"

    def __init__(self, container: ContainerClient):
        self.container = container

    def handle(self, key: str, work: Work) -> Outcome:
        blob = self.container.get_blob_client(f"tutorial/{key}")
        if not blob.exists():
            _create_if_missing(blob)
        try:
            lease = blob.acquire_lease(TUTORIAL_LEASE)
        except HttpResponseError as error:
            if _lease_busy(error):
                return Outcome.DONE  # skipped
            raise
        try:
            with renewing(lease, TUTORIAL_RENEW_EVERY):
                work()
        finally:
            lease.release()
        return Outcome.DONE


class LeaseOnly:
    """Acquire a 15 s lease or skip; nothing records that the work was done."""

    name = "lease_only"

    def __init__(self, container: ContainerClient):
        self.container = container

    def handle(self, key: str, work: Work) -> Outcome:
        blob = self.container.get_blob_client(f"lease-only/{key}")
        try:
            lease = blob.acquire_lease(15)
        except ResourceNotFoundError:
            _create_if_missing(blob)
            return self.handle(key, work)
        except HttpResponseError as error:
            if _lease_busy(error):
                return Outcome.DONE  # skipped
            raise
        try:
            with renewing(lease, 5.0):
                work()
        finally:
            lease.release()
        return Outcome.DONE


class PowertoolsIdempotency:
    """Put-if-absent INPROGRESS first; on conflict read back; COMPLETED after the work."""

    name = "powertools"

    def __init__(self, container: ContainerClient, expiry: float = POWERTOOLS_IN_PROGRESS_EXPIRY):
        self.container = container
        self.expiry = expiry

    def _record(self, status: str) -> bytes:
        expiry = time.time() + self.expiry
        return json.dumps({"status": status, "in_progress_expiry": expiry}).encode()

    def handle(self, key: str, work: Work) -> Outcome:
        blob = self.container.get_blob_client(f"powertools/{key}")
        try:
            blob.upload_blob(self._record("INPROGRESS"), overwrite=False)
        except ResourceExistsError:
            download = blob.download_blob()
            record = json.loads(download.readall())
            if record["status"] == "COMPLETED":
                return Outcome.DONE  # skipped: already done
            if record["in_progress_expiry"] > time.time():
                return Outcome.DEFERRED  # IdempotencyAlreadyInProgressError: retried later
            try:  # an abandoned run: take it over, if nobody else did first
                blob.upload_blob(
                    self._record("INPROGRESS"), overwrite=True,
                    etag=download.properties.etag, match_condition=MatchConditions.IfNotModified,
                )  # fmt: skip
            except HttpResponseError:
                return Outcome.DEFERRED
        try:
            work()
        except BaseException:
            blob.delete_blob()
            raise
        blob.upload_blob(self._record("COMPLETED"), overwrite=True)
        return Outcome.DONE


class NoGuard:
    name = "none"

    def __init__(self, container: ContainerClient):
        self.container = container

    def handle(self, key: str, work: Work) -> Outcome:
        work()
        return Outcome.DONE


class Ours:
    """`@once(key)` from this library, busy deliveries deferred (what `Busy.DEFER` does)."""

    name = "ours"

    def __init__(self, container: ContainerClient, in_progress_timeout: float = 300.0):
        self._busy_until = threading.local()

        def deferred(error: Exception) -> Outcome:
            self._busy_until.value = getattr(error, "expires_at", 0.0)
            return Outcome.DEFERRED

        @once(
            "ours-{key}",
            storage=BlobRecordStore(container),
            busy=deferred,
            in_progress_timeout=in_progress_timeout,
        )
        def guarded(key: str, work: Work) -> Any:
            work()
            return None

        self._guarded = guarded

    def handle(self, key: str, work: Work) -> Outcome:
        result = self._guarded(key, work)
        return Outcome.DEFERRED if result == Outcome.DEFERRED else Outcome.DONE

    def defer_delay(self) -> float:
        """The visibility delay `Busy.DEFER` gives this thread's last deferred copy: until the
        busy record could expire (one machine here, so its clock reads the record's expiry),
        plus a second, rounded to whole seconds at least 1, as `Busy.DEFER` rounds it."""
        until = float(getattr(self._busy_until, "value", 0.0))
        return float(max(1, round(until - time.time() + 1.0)))


Alternative = (
    Ours | WebJobsSingleton | TutorialPattern | LeaseOnly | PowertoolsIdempotency | NoGuard
)


def make(name: str, container: ContainerClient, **options: Any) -> Alternative:
    """The alternative called `name`, working in `container`."""
    classes: dict[str, Any] = {
        "ours": Ours, "webjobs": WebJobsSingleton, "tutorial": TutorialPattern,
        "lease_only": LeaseOnly, "powertools": PowertoolsIdempotency, "none": NoGuard,
    }  # fmt: skip
    if name not in classes:
        raise ValueError(f"unknown alternative {name!r}; choose from {', '.join(NAMES)}")
    return classes[name](container, **options)  # type: ignore[no-any-return]
