"""The library's spans and metrics, read with the OpenTelemetry SDK's in-memory exporters.

The SDK is configured here, as an app would (the library only calls the API): one tracer and
one meter provider for this process, set once. Every check reads what one test added."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from blobsingleton import Busy, LeaseLost, current_lease, once, singleton
from blobsingleton._queues import QueueMessageLike
from blobsingleton.records import BlobRecordStore
from blobsingleton.testing import crashed_run, memory_backends
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

SPANS = InMemorySpanExporter()
READER = InMemoryMetricReader()
_tracing = TracerProvider()
_tracing.add_span_processor(SimpleSpanProcessor(SPANS))
trace.set_tracer_provider(_tracing)
metrics.set_meter_provider(MeterProvider(metric_readers=[READER]))


def points() -> dict[tuple[str, tuple[tuple[str, Any], ...]], float]:
    """Every metric point now: (name, attributes) -> a counter's sum or a histogram's count."""
    found: dict[tuple[str, tuple[tuple[str, Any], ...]], float] = {}
    data = READER.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "count", None) or getattr(point, "value", 0)
                    found[(metric.name, tuple(sorted(point.attributes.items())))] = value
    return found


class Telemetry:
    def __init__(self) -> None:
        SPANS.clear()
        self.before = points()

    def spans(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in SPANS.get_finished_spans() if s.name.startswith(prefix)]

    def added(self, name: str, **attributes: Any) -> float:
        key = (name, tuple(sorted(attributes.items())))
        return points().get(key, 0) - self.before.get(key, 0)

    def added_by_attribute(self, name: str, attribute: str) -> dict[Any, float]:
        """What each value of `attribute` added to metric `name` since the test began."""
        now, found = points(), {}
        for (metric, attributes), value in now.items():
            if metric == name:
                label = dict(attributes)[attribute]
                found[label] = (
                    found.get(label, 0) + value - self.before.get((metric, attributes), 0)
                )
        return {label: value for label, value in found.items() if value}


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    yield Telemetry()


def test_a_contended_singleton_is_one_span_per_invocation_with_its_wait_and_token(
    storage_env: str, telemetry: Telemetry
) -> None:
    key = uuid.uuid4().hex[:8]
    inside, release = threading.Event(), threading.Event()

    @singleton("report-{key}", scope="app")
    def report(key: str, first: bool) -> int:
        if first:
            inside.set()
            release.wait(10)
        return current_lease().token

    first = threading.Thread(target=report, args=(key, True))
    first.start()
    assert inside.wait(10)
    second = threading.Thread(target=report, args=(key, False))
    second.start()
    threading.Timer(0.5, release.set).start()
    first.join(10)
    second.join(30)
    spans = telemetry.spans("singleton report-{key}")
    assert len(spans) == 2
    attributes = [dict(s.attributes or {}) for s in spans]
    assert {a["blobsingleton.key"] for a in attributes} == {f"report-{key}"}
    assert sorted(a["blobsingleton.token"] for a in attributes) == [1, 2]
    assert all(a["blobsingleton.outcome"] == "ran" for a in attributes)
    waits = sorted(a["blobsingleton.wait_s"] for a in attributes)
    assert waits[1] >= 0.3  # the second waited for the first
    acquires = telemetry.spans("blobsingleton.acquire")
    assert len(acquires) == 2 and all(a.parent is not None for a in acquires)
    assert telemetry.added("blobsingleton.wait", decorator="singleton") == 2
    assert telemetry.added("blobsingleton.wait", decorator="lease") == 2
    assert telemetry.added("blobsingleton.invocations", decorator="singleton", outcome="ran") == 2


def test_a_duplicate_is_a_replayed_span_and_counted(storage_env: str, telemetry: Telemetry) -> None:
    @once("email-{event_id}")
    def send(event_id: str) -> str:
        return "sent"

    send("e1")
    send("e1")
    outcomes = [dict(s.attributes or {}) for s in telemetry.spans("once email-{event_id}")]
    assert [a["blobsingleton.outcome"] for a in outcomes] == ["ran", "replayed"]
    assert outcomes[0]["blobsingleton.attempt"] == 1
    assert telemetry.added("blobsingleton.invocations", decorator="once", outcome="replayed") == 1
    assert telemetry.added("blobsingleton.hold", decorator="once") == 1  # only the run held it
    operations = telemetry.added_by_attribute("blobsingleton.storage.operations", "operation")
    # the run: one create and one settle, no look before the create; the duplicate: answered
    # from the completion remembered in this process, no request of its own
    assert operations.get("create run-once record") == 1, operations
    assert operations.get("update run-once record") == 1, operations
    assert sum(operations.values()) == 2, operations


def test_a_lost_lease_and_a_crashed_runs_takeover_are_counted(
    storage_env: str, telemetry: Telemetry
) -> None:
    from azure.storage.blob import BlobLeaseClient
    from libsupport import blob_service

    @singleton("lost-{n}", scope="app")
    def hold(n: int) -> None:
        container = blob_service().get_container_client(_lease_container())
        blob = container.get_blob_client(current_lease().name)
        BlobLeaseClient(blob).break_lease(lease_break_period=0)
        assert current_lease().lost.wait(20)

    with pytest.raises(LeaseLost):
        hold(1)
    assert telemetry.added("blobsingleton.leases.lost") == 1
    assert (
        dict(telemetry.spans("singleton lost-")[0].attributes or {})["blobsingleton.outcome"]
        == "lost"
    )

    crashed_run(BlobRecordStore(), "night-mon", 0.0)  # abandoned on sight

    @once("night-{day}", scope="app")
    def night(day: str) -> str:
        return "ran"

    assert night("mon") == "ran"
    assert telemetry.added("blobsingleton.takeovers") == 1


def _lease_container() -> str:
    import os

    return os.environ["LEASE_CONTAINER"]


def test_a_span_the_caller_started_is_the_parent(telemetry: Telemetry) -> None:
    with memory_backends():

        @once("k-{n}")
        def work(n: int) -> int:
            return n

        tracer = trace.get_tracer("the-app")
        with tracer.start_as_current_span("invocation") as parent:
            work(1)
    [child] = telemetry.spans("once k-{n}")
    assert child.parent is not None
    assert child.parent.span_id == parent.get_span_context().span_id
    assert child.context.trace_id == parent.get_span_context().trace_id


def test_busy_outcomes_are_named(telemetry: Telemetry) -> None:
    with memory_backends() as memory:

        @singleton("busy", scope="app", busy=Busy.SKIP)
        def skipped() -> None: ...

        memory.locks.acquire("busy", "someone", 15.0)
        assert skipped() is None
    assert telemetry.added("blobsingleton.invocations", decorator="singleton", outcome="skipped")


def test_a_defer_without_a_message_that_waited_for_a_replay_is_replayed(
    telemetry: Telemetry,
) -> None:
    inside, release = threading.Event(), threading.Event()
    with memory_backends():

        @once("job-{n}", busy=Busy.defer(queue="jobs", hold=0.0))
        def job(n: int, msg: QueueMessageLike | None = None) -> str:  # called without one
            inside.set()
            release.wait(10)
            return "done"

        first = threading.Thread(target=job, args=(1,))
        first.start()
        assert inside.wait(10)
        threading.Timer(0.3, release.set).start()
        assert job(1) == "done"  # waited, then the stored result
        first.join(10)
    outcomes = [dict(s.attributes or {})["blobsingleton.outcome"] for s in telemetry.spans("once")]
    assert sorted(outcomes) == ["ran", "replayed"]


CHILD = """
import json
from opentelemetry import trace
from blobsingleton import once
from blobsingleton.testing import memory_backends
with memory_backends():
    @once("k")
    def work():
        return trace.get_current_span().is_recording()
    recording = work()
print(json.dumps({"recording": recording,
                  "provider": type(trace.get_tracer_provider()).__name__}))
"""


def test_without_an_sdk_nothing_is_recorded_and_no_provider_is_installed() -> None:
    ran = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout.splitlines()[-1]) == {
        "recording": False, "provider": "ProxyTracerProvider"
    }  # fmt: skip
