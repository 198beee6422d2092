"""Where the app's and the library's spans and metrics go: configured once, at start-up, from
app settings (docs/telemetry.md). The only module that imports the OpenTelemetry SDK or an
exporter, and only when a setting asks for one: with neither setting nothing is imported and
every span and metric stays the API's no-op.

    APPLICATIONINSIGHTS_CONNECTION_STRING   Application Insights, through Microsoft's
                                            distro (`configure_azure_monitor()`)
    OTEL_EXPORTER_OTLP_ENDPOINT             any OTLP endpoint (HTTP/protobuf), with the SDK's
                                            own OTEL_* settings (headers, service name...)

Both set: both get everything. When the Python worker already configured the distro
(PYTHON_ENABLE_OPENTELEMETRY non-empty: it does so before it loads the app), the
SDK it installed is kept (a second `configure_azure_monitor()` would export everything twice)
and an OTLP endpoint is added to it. Configured here, the distro sends spans and metrics, not
log records (OTEL_LOGS_EXPORTER=none unless set): the host forwards the worker's logs already.
A setting whose package is missing fails the start-up, naming both.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from shared.settings import setting

log = logging.getLogger(__name__)

APP_INSIGHTS = "APPLICATIONINSIGHTS_CONNECTION_STRING"
OTLP_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
#: Read by the distro: the host already sends the worker's log records to Application
#: Insights when the worker does not stream them itself, so the app's distro sends none.
LOGS_EXPORTER = "OTEL_LOGS_EXPORTER"


class TelemetryUnavailable(RuntimeError):
    """A telemetry setting is set, but the package it needs is not installed."""


def _sdk() -> tuple[Any, Any]:
    """The SDK's tracer and meter provider classes (ImportError when it is not installed)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider

    return TracerProvider, MeterProvider


def _otlp() -> tuple[Any, Any]:
    """A span processor and a metric reader exporting to OTEL_EXPORTER_OTLP_ENDPOINT (the
    exporters read it and the other OTEL_EXPORTER_OTLP_* settings themselves)."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    return BatchSpanProcessor(OTLPSpanExporter()), PeriodicExportingMetricReader(
        OTLPMetricExporter()
    )


def _needs(package: str, name: str, error: ImportError) -> TelemetryUnavailable:
    return TelemetryUnavailable(
        f"app setting {name} is set, but {package} is not installed ({error}): add it to "
        "requirements.txt, or remove the setting"
    )


def configure_telemetry() -> str:
    """Install the SDK and exporters the settings ask for; returns what was done: "off",
    "worker" (kept the worker's), "azure-monitor", "otlp", or "azure-monitor+otlp"."""
    app_insights = setting("APPLICATIONINSIGHTS_CONNECTION_STRING")
    otlp = setting("OTEL_EXPORTER_OTLP_ENDPOINT")
    if not app_insights and not otlp:
        return "off"
    from opentelemetry import metrics, trace

    try:
        tracer_provider, meter_provider = _sdk()
        exporting = _otlp() if otlp else None
    except ImportError as error:
        name = OTLP_ENDPOINT if otlp else APP_INSIGHTS
        raise _needs("the OpenTelemetry SDK and OTLP exporter", name, error) from error
    installed = trace.get_tracer_provider()
    if isinstance(installed, tracer_provider):  # the worker's (PYTHON_ENABLE_OPENTELEMETRY)
        if exporting is not None:
            installed.add_span_processor(exporting[0])
            meters = metrics.get_meter_provider()
            if isinstance(meters, meter_provider):
                meters.add_metric_reader(exporting[1])
        log.info("telemetry: the worker's OpenTelemetry SDK kept%s",
                 " (and OTLP added)" if exporting else "")  # fmt: skip
        return "worker"
    if app_insights:
        try:
            from azure.monitor.opentelemetry import configure_azure_monitor
        except ImportError as error:
            raise _needs("azure-monitor-opentelemetry", APP_INSIGHTS, error) from error
        os.environ.setdefault(LOGS_EXPORTER, "none")  # the host has them (see above)
        extra: dict[str, Any] = {}
        if exporting is not None:
            extra = {"span_processors": [exporting[0]], "metric_readers": [exporting[1]]}
        configure_azure_monitor(connection_string=app_insights, **extra)
        done = "azure-monitor+otlp" if exporting else "azure-monitor"
    else:
        assert exporting is not None
        from opentelemetry.sdk.resources import Resource

        resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
        spans = tracer_provider(resource=resource)
        spans.add_span_processor(exporting[0])
        trace.set_tracer_provider(spans)
        metrics.set_meter_provider(meter_provider(resource=resource, metric_readers=[exporting[1]]))
        done = "otlp"
    log.info("telemetry: %s", done)
    return done
