"""The OpenTelemetry SDK's in-memory exporters, for the tests that read the app's telemetry.

A process has one global tracer and meter provider, set once. The library's own telemetry
tests (packages/blobsingleton/tests/once/test_telemetry.py) set theirs when they are
collected, which `make test` does in every process; so `install()` (the `telemetry`
fixture's, called when a test first asks for it, after collection) attaches this module's
exporter and reader to the SDK providers already installed, and installs new ones only when
there are none. Either way the app's code sees one global SDK, as under the worker."""

from __future__ import annotations

import functools
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

Point = tuple[str, tuple[tuple[str, Any], ...]]


@functools.cache
def install() -> tuple[InMemorySpanExporter, InMemoryMetricReader]:
    """This process's span exporter and metric reader, on the global SDK providers."""
    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracing = trace.get_tracer_provider()
    if not isinstance(tracing, TracerProvider):
        tracing = TracerProvider()
        trace.set_tracer_provider(tracing)
    tracing.add_span_processor(SimpleSpanProcessor(spans))
    meters = metrics.get_meter_provider()
    if isinstance(meters, MeterProvider):
        meters.add_metric_reader(reader)
    else:
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    return spans, reader


def points(reader: InMemoryMetricReader) -> dict[Point, float]:
    """Every metric point now: (name, attributes) -> a counter's sum or a histogram's count."""
    found: dict[Point, float] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "count", None) or getattr(point, "value", 0)
                    found[(metric.name, tuple(sorted(point.attributes.items())))] = value
    return found


class Telemetry:
    """What one test added: the spans finished and the metric points grown since it began."""

    def __init__(self) -> None:
        self._spans, self._reader = install()
        self._spans.clear()
        self.before = points(self._reader)

    def spans(self, name: str) -> list[ReadableSpan]:
        return [s for s in self._spans.get_finished_spans() if s.name == name]

    def attributes(self, name: str) -> list[dict[str, Any]]:
        """The attributes of each finished span named `name`, in the order they ended."""
        return [dict(s.attributes or {}) for s in self.spans(name)]

    def added(self, name: str, **attributes: Any) -> float:
        key = (name, tuple(sorted(attributes.items())))
        return points(self._reader).get(key, 0) - self.before.get(key, 0)

    def added_by(self, name: str) -> dict[tuple[tuple[str, Any], ...], float]:
        """What each attribute set added to metric `name` since the test began (non-zero)."""
        now = points(self._reader)
        found = {
            attributes: value - self.before.get((metric, attributes), 0)
            for (metric, attributes), value in now.items()
            if metric == name
        }
        return {attributes: value for attributes, value in found.items() if value}
