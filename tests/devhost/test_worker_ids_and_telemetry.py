"""devhost sets invocation ids and reads the telemetry switches as Microsoft's Python worker
4.34 does (issue 42 §2, §3; the worker's source lines are cited in devhost/invocation.py).

Ids: under devhost, as under the worker, a function without `context` gets records whose
`invocation_id=` is the id the worker ships them with, sync and async. Telemetry: worker 4.34
configures the Azure Monitor distro when PYTHON_ENABLE_OPENTELEMETRY is non-empty ("false"
included), with APPLICATIONINSIGHTS_CONNECTION_STRING as it is; the committed sample settings
must not start it with an empty connection string.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from blobsingleton import events, once
from blobsingleton.testing import memory_backends
from devhost_testkit import Shipped

from devhost import invocation
from devhost.invocation import FunctionContract, WorkerRuntime

ROOT = Path(__file__).resolve().parents[2]
_ID = re.compile(r"\binvocation_id=(\S+)")


@pytest.fixture
def runtime() -> Iterator[WorkerRuntime]:
    running = WorkerRuntime(2)
    try:
        yield running
    finally:
        running.close()


def call(runtime: WorkerRuntime, fn: Callable[..., Any], **args: Any) -> Any:
    return runtime.call(FunctionContract.of(fn.__name__, fn, []), fn, args)


def test_records_of_functions_without_context_carry_devhosts_id(
    runtime: WorkerRuntime, shipped: Shipped
) -> None:
    seen: list[str | None] = []

    @once("devhost-sync-{n}")
    def sync_job(n: int) -> None:
        seen.append(invocation.current_invocation_id())
        events.emit("stale_writer", key="k", token=n)

    @once("devhost-async-{n}")
    async def async_job(n: int) -> None:
        seen.append(invocation.current_invocation_id())

    with memory_backends():
        for job in (sync_job, async_job):
            call(runtime, job, n=1)
            call(runtime, job, n=1)  # a duplicate, answered from the record
    sync_id, async_id = seen
    assert sync_id and async_id and sync_id != async_id
    assert shipped.events("stale_writer") == [(sync_id, sync_id)]
    completed, replays = shipped.events("completed"), shipped.events("replay")
    assert [c[0] for c in completed] == [sync_id, async_id]
    assert all(message == tag for message, tag in completed + replays)
    assert len({tag for _, tag in replays}) == 2 and sync_id not in {t for _, t in replays}


def test_devhost_stands_in_for_the_workers_dispatcher(runtime: WorkerRuntime) -> None:
    """Where the worker keeps its id machinery in its process, devhost keeps its own."""
    module = sys.modules[invocation.WORKER_DISPATCHER]
    assert module.get_current_invocation_id is invocation.current_invocation_id
    assert module.ContextEnabledTask is invocation.ContextEnabledTask
    assert module._invocation_id_local is invocation._invocation_local


def test_the_loop_threads_id_stays_set_after_an_async_invocation(runtime: WorkerRuntime) -> None:
    """As the worker (dispatcher.py l. 656): set on the loop's thread, never cleared there."""
    ids: list[str] = []

    async def fn(context: Any) -> None:
        ids.append(context.invocation_id)

    call(runtime, fn)
    seen: list[str | None] = []
    done = threading.Event()

    def callback() -> None:  # no task: the thread-local only
        seen.append(invocation.current_invocation_id())
        done.set()

    runtime.loop.call_soon_threadsafe(callback)
    assert done.wait(30)
    assert seen == ids


# --- the telemetry switches, as worker 4.34 reads them ------------------------------------


def sample_values() -> dict[str, str]:
    return {k: str(v) for k, v in json.loads((ROOT / "local.settings.sample.json").read_text())[
        "Values"].items()}  # fmt: skip


def test_the_sample_settings_leave_the_workers_distro_off() -> None:
    values = sample_values()
    assert not invocation.opentelemetry_enabled(values)
    # the trap the sample fell into: 4.34 tests the string, so "false" turns it on
    assert invocation.opentelemetry_enabled({**values, "PYTHON_ENABLE_OPENTELEMETRY": "false"})
    assert not invocation.opentelemetry_enabled({**values, "PYTHON_ENABLE_OPENTELEMETRY": ""})
    assert "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY" not in values  # 4.34 never reads it


START = textwrap.dedent(
    """
    import logging, sys
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s: %(message)s")
    from devhost.invocation import configure_worker_telemetry, propagates_trace_context
    print("configured", configure_worker_telemetry(), propagates_trace_context())
    """
)


def start(settings: dict[str, str]) -> str:
    """What devhost's worker start-up logs with `settings` (in a process of its own: the
    distro, once configured, stays for the process)."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **settings,
           "APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL": "true"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", START], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=True)  # fmt: skip
    return done.stdout


def test_with_the_sample_settings_the_worker_configures_nothing() -> None:
    output = start(sample_values())
    assert "configured False False" in output
    assert "azure_functions_worker" not in output


def test_false_starts_the_distro_with_an_empty_connection_string_and_fails_as_in_4_34() -> None:
    """What the issue saw under worker 4.34 on every start with the old sample."""
    output = start({**sample_values(), "PYTHON_ENABLE_OPENTELEMETRY": "false"})
    assert "azure_functions_worker: Error initializing Azure monitor distro." in output
    assert "ValueError" in output
    assert "configured False False" in output  # no trace context for invocations either


def test_the_azure_monitor_switch_of_later_workers_does_nothing_in_4_34() -> None:
    output = start({**sample_values(), "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY": "true"})
    assert "configured False False" in output
