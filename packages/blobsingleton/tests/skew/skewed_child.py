"""A child process whose wall clock is off by OFFSET seconds, running one guarded call.

usage: skewed_child.py OFFSET KIND KEY WORK_SECONDS IN_PROGRESS_TIMEOUT [until-told]
  KIND: once-alo | once-amo | singleton, with "-wait" to wait for a busy key instead of
        skipping it (the guard around the work and its busy policy)
  OFFSET: added to time.time() / time.time_ns() before anything else runs (the monotonic
          clocks are left alone), as on a machine whose clock is off.
Prints, one line each, flushed: "clock T" (its time.time()), "start" (about to call), "ran"
(the work started), "done" (the work finished), "result VALUE" (what the call returned: None
when skipped, LeaseLost when `@singleton` raised it after the body).
The work takes WORK_SECONDS (with `until-told`, and then until a line arrives on stdin, so
that a test knows its callers called while it worked), during which the heartbeat or lease
renewal keeps its claim.
Under `singleton`, "ran TOKEN" carries the lease's fencing token, and after its work the call
does what the library's page asks before a side effect: "held" or "lost" (`ensure_held()`
returned or raised; "lost" also says whether `lease.lost` was set by then), then "write
accepted" or "write refused" from a fenced write of its token to a store that refuses any
token lower than one it has already taken (a blob in the same Azurite, `fenced-store/KEY`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

OFFSET = float(sys.argv[1])
_real_time, _real_time_ns = time.time, time.time_ns
time.time = lambda: _real_time() + OFFSET  # type: ignore[assignment]
time.time_ns = lambda: _real_time_ns() + int(OFFSET * 1e9)  # type: ignore[assignment]

from azure.core import MatchConditions  # noqa: E402
from azure.core.exceptions import (  # noqa: E402
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.storage.blob import BlobServiceClient  # noqa: E402
from blobsingleton import Busy, LeaseLost, Mode, once, singleton  # noqa: E402

try:
    from blobsingleton.leases import install_signal_handlers
except ImportError:  # library 0.2 (`python -m bench skew --library` measures it too)
    from blobsingleton import install_signal_handlers  # type: ignore[attr-defined,no-redef]
try:
    from blobsingleton import current_lease
except ImportError:  # a library without it: the work reports no token and no fenced write
    current_lease = None  # type: ignore[assignment]


def fenced_write(key: str, token: int) -> bool:
    """Store `token` unless the store already holds a higher one (compare-and-swap on the ETag):
    the "store that refuses older tokens" of the library's page, as small as it can be."""
    service = BlobServiceClient.from_connection_string(os.environ["AzureWebJobsStorage"])
    container = service.get_container_client("fenced-store")
    with contextlib.suppress(ResourceExistsError):
        container.create_container()
    blob = container.get_blob_client(key)
    while True:
        try:
            properties = blob.get_blob_properties()
        except ResourceNotFoundError:
            stored, etag = None, None
        else:
            stored, etag = int(properties.metadata["token"]), properties.etag
        if stored is not None and stored > token:
            return False
        try:
            if etag is None:
                blob.upload_blob(b"", metadata={"token": str(token)}, overwrite=False)
            else:
                blob.upload_blob(
                    b"",
                    metadata={"token": str(token)},
                    overwrite=True,
                    etag=etag,
                    match_condition=MatchConditions.IfNotModified,
                )
        except (ResourceExistsError, ResourceModifiedError):
            continue  # another writer came between: read again
        return True


def main() -> None:
    kind, key, work_seconds = sys.argv[2], sys.argv[3], float(sys.argv[4])
    in_progress_timeout = float(sys.argv[5])
    until_told = sys.argv[6:] == ["until-told"]
    install_signal_handlers()
    print(f"clock {time.time()}", flush=True)
    busy = Busy.wait(timeout=300) if kind.endswith("-wait") else Busy.skip()

    def wait() -> None:
        time.sleep(work_seconds)
        if until_told:
            sys.stdin.readline()

    def work() -> str:
        if not kind.startswith("singleton") or current_lease is None:
            print("ran", flush=True)
            wait()
            print("done", flush=True)
            return "sent"
        lease = current_lease()
        print(f"ran {lease.token}", flush=True)
        wait()
        print("done", flush=True)
        try:
            lease.ensure_held()
            print("held", flush=True)
        except LeaseLost:
            print(f"lost lost_set={lease.lost.is_set()}", flush=True)
        accepted = fenced_write(key, lease.token)
        print("write accepted" if accepted else "write refused", flush=True)
        return "sent"

    if kind.startswith("singleton"):
        guarded = singleton(key, busy=busy, period=15)(work)
    else:
        guarded = once(
            key,
            mode=Mode.AT_MOST_ONCE if kind.startswith("once-amo") else Mode.AT_LEAST_ONCE,
            in_progress_timeout=in_progress_timeout,
            busy=busy,
        )(work)
    print("start", flush=True)
    try:
        result = guarded()
    except LeaseLost:  # `@singleton` raises a loss after the body, so the host sees the overlap
        result = "LeaseLost"
    print(f"result {result}", flush=True)


if __name__ == "__main__":
    main()
