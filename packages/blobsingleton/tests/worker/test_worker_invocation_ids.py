"""The library's records carry the invocation id the worker gives them, with or without
`context` in the function's signature, on the sync and async paths (issue 42 §2).

Run under Microsoft's Python worker 4.34 as its source sets the id (`worker_434`, lines
cited there): each `event=` record's `invocation_id=` equals the id the worker ships the record
with and the host's id for the invocation. Before, a function without `context` (every app
function) wrote a fresh uuid there, which joined nothing.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import re
import threading
import types
from collections.abc import Iterator
from typing import Any

import pytest
from blobsingleton import _azure_worker, _invocation, once, singleton
from blobsingleton.testing import memory_backends
from worker_434 import MODULE, Worker

_ID = re.compile(r"\binvocation_id=(\S+)")
log = logging.getLogger("blobsingleton.test")


@pytest.fixture
def worker() -> Iterator[Worker]:
    running = Worker()
    try:
        yield running
    finally:
        running.close()


def events(worker: Worker, kind: str) -> list[tuple[str | None, str | None]]:
    """(the id in the message, the id the worker shipped it with) of each `kind` record."""
    found = []
    for message, tag in worker.shipped.records:
        if message.startswith(f"event={kind} "):
            match = _ID.search(message)
            found.append((match.group(1) if match else None, tag))
    return found


def test_once_records_carry_the_workers_id_without_context(worker: Worker) -> None:
    @once("sync-{n}")
    def sync_job(n: int) -> int:
        return n

    @once("async-{n}")
    async def async_job(n: int) -> int:
        return n

    with memory_backends():
        for job in (sync_job, async_job):
            first = worker.invoke(job, n=1)
            again = worker.invoke(job, n=1)  # a duplicate: answered from the record
            assert events(worker, "completed")[-1] == (first, first)
            assert events(worker, "replay")[-1] == (again, again)
    assert len(events(worker, "completed")) == len(events(worker, "replay")) == 2


def test_the_librarys_threads_carry_the_workers_id_without_context(worker: Worker) -> None:
    """A thread the library starts (lease renewal, a run-once heartbeat) is tied by the
    worker's thread-local, which the library sets there: the worker does not know the thread."""

    def fn() -> None:
        with _invocation.invocation_scope({}):
            started = threading.Thread(
                target=_invocation.thread_target(lambda: log.warning("from a library thread"))
            )
            started.start()
            started.join()
        plain = threading.Thread(target=lambda: log.warning("from another thread"))
        plain.start()
        plain.join()

    invocation_id = worker.invoke(fn)
    shipped = dict(worker.shipped.records)
    assert shipped["from a library thread"] == invocation_id
    assert shipped["from another thread"] is None  # as the worker: a thread it cannot name


def test_an_apps_own_event_carries_the_workers_id(worker: Worker) -> None:
    from blobsingleton import events as app_events

    def fn() -> None:
        app_events.emit("stale_writer", key="import-acme", token=4)

    invocation_id = worker.invoke(fn)
    assert events(worker, "stale_writer") == [(invocation_id, invocation_id)]


def test_context_gives_the_same_id_where_the_function_takes_it(worker: Worker) -> None:
    @once("with-context-{n}")
    def job(n: int, context: Any) -> str:
        return str(context.invocation_id)

    with memory_backends():
        first = worker.invoke(job, n=1)
    assert events(worker, "completed") == [(first, first)]


def test_singleton_leases_record_the_workers_id_without_context(
    worker: Worker, storage_env: str
) -> None:
    """The lease's `event=acquire` names the worker's invocation, as its owner record (the
    lock blob's metadata, which `blobsingleton.ops` shows) does."""

    @singleton("ids-sync")
    def sync_job() -> None:
        pass

    @singleton("ids-async")
    async def async_job() -> None:
        pass

    sync_id = worker.invoke(sync_job)
    async_id = worker.invoke(async_job)
    assert events(worker, "acquire") == [(sync_id, sync_id), (async_id, async_id)]


def test_without_the_workers_lookup_context_still_gives_the_id(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker whose dispatcher lost `get_current_invocation_id` (an upgrade that removed or
    renamed it): the public API still ties functions that take `context`, and the library says
    once that the others cannot be."""
    changed = types.ModuleType(MODULE)
    changed._invocation_id_local = threading.local()  # type: ignore[attr-defined]
    monkeypatch.setitem(__import__("sys").modules, MODULE, changed)
    monkeypatch.setattr(_azure_worker, "_warned", False)
    caplog.set_level(logging.INFO, logger="blobsingleton")

    class Context:
        invocation_id = "from-context"
        thread_local_storage = threading.local()

    with _invocation.invocation_scope({"context": Context()}):
        assert _invocation.current_invocation_id() == "from-context"
    with _invocation.invocation_scope({}):
        assert _invocation.current_invocation_id() is None
    assert _invocation.current_invocation_id() is None
    warnings = [r.getMessage() for r in caplog.records if "get_current_invocation_id" in
                r.getMessage()]  # fmt: skip
    assert len(warnings) == 1
    assert "azure_functions_worker.dispatcher" in warnings[0]


@pytest.mark.services  # needs Microsoft's worker beside the library: skipped without it
def test_the_real_workers_dispatcher_has_what_the_library_reads() -> None:
    """Where the worker is installed (its own process, a CI job that adds it): the names
    `_azure_worker` reads are there, and `context.thread_local_storage` is the thread-local."""
    # The package on disk, not a module a stand-in put in sys.modules (devhost installs one
    # under MODULE's name in a process that ran a devhost test before this one).
    if importlib.util.find_spec(MODULE.split(".")[0]) is None:
        pytest.skip(f"{MODULE}: Microsoft's worker is not installed")
    dispatcher = importlib.import_module(MODULE)
    assert callable(dispatcher.get_current_invocation_id)
    assert isinstance(dispatcher._invocation_id_local, threading.local)
    assert dispatcher.ContextEnabledTask.AZURE_INVOCATION_ID == "__azure_function_invocation_id__"
