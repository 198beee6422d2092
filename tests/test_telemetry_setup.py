"""Where telemetry goes, as the app configures it at start-up (shared/telemetry_setup.py): each
case a fresh Python process importing function_app as the worker does, with the settings an
operator would set. Exporters send to a local receiver standing for Application Insights'
ingestion endpoint or an OTLP collector."""

from __future__ import annotations

import contextlib
import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from tests.support import child_env

pytestmark = pytest.mark.services  # child processes

KEY = "00000000-0000-0000-0000-000000000001"  # an instrumentation key of no resource
TELEMETRY_SETTINGS = ("APPLICATIONINSIGHTS_CONNECTION_STRING", "OTEL_EXPORTER_OTLP_ENDPOINT",
                      "PYTHON_ENABLE_OPENTELEMETRY")  # fmt: skip

START = """
import json, sys
{before}
from opentelemetry import metrics, trace
from blobsingleton import once
from blobsingleton.testing import memory_backends
import function_app
from shared import telemetry, telemetry_setup
with memory_backends():
    @once("k-{{n}}")
    def work(n):
        telemetry.email("sent", "outbox")
        return n
    work(1)
    work(1)
flushed = [getattr(p, "force_flush", lambda: None)() for p in
           (trace.get_tracer_provider(), metrics.get_meter_provider())]
print(json.dumps({{
    "done": LAST,
    "tracer_provider": type(trace.get_tracer_provider()).__name__,
    "sdk_imported": "opentelemetry.sdk" in sys.modules,
    "distro_imported": "azure.monitor.opentelemetry" in sys.modules,
}}))
"""
# What configure_telemetry() returned at start-up, read back by calling it through a spy.
SPY = """
from shared import telemetry_setup as _setup
_real = _setup.configure_telemetry
LAST = None
def _spy():
    global LAST
    LAST = _real()
    return LAST
_setup.configure_telemetry = _spy
"""


class Receiver(http.server.ThreadingHTTPServer):
    """Records the path and body of every POST; answers 200 (an ingestion's "accepted")."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, bytes]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                outer.posts.append((self.path, self.rfile.read(length)))
                body = b'{"itemsReceived": 1, "itemsAccepted": 1, "errors": []}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@contextlib.contextmanager
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def start(settings: dict[str, str], before: str = "") -> subprocess.CompletedProcess[str]:
    env = child_env(**settings)
    for name in TELEMETRY_SETTINGS:
        if name not in settings:
            env.pop(name, None)
    env["APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL"] = "true"
    code = START.format(before=SPY + before)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def answer(ran: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert ran.returncode == 0, ran.stderr[-3000:]
    result: dict[str, object] = json.loads(ran.stdout.splitlines()[-1])
    return result


def test_without_a_setting_no_sdk_is_imported_and_nothing_is_recorded() -> None:
    assert answer(start({})) == {
        "done": "off", "tracer_provider": "ProxyTracerProvider",
        "sdk_imported": False, "distro_imported": False,
    }  # fmt: skip


def test_an_otlp_endpoint_gets_the_apps_and_the_librarys_spans_and_metrics() -> None:
    with receiver() as collector:
        result = answer(start({"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
                               "OTEL_SERVICE_NAME": "eligibility-test"}))  # fmt: skip
    assert result["done"] == "otlp" and result["distro_imported"] is False
    by_path: dict[str, bytes] = {}
    for path, body in collector.posts:
        by_path[path] = by_path.get(path, b"") + body
    assert b"once k-{n}" in by_path["/v1/traces"]  # the library's span, in protobuf
    assert b"eligibility-test" in by_path["/v1/traces"]
    assert (
        b"app.emails" in by_path["/v1/metrics"]
        and b"blobsingleton.invocations" in (by_path["/v1/metrics"])
    )


def test_application_insights_gets_them_through_the_distro() -> None:
    with receiver() as ingestion:
        connection = (
            f"InstrumentationKey={KEY};IngestionEndpoint={ingestion.url}/;"
            f"LiveEndpoint={ingestion.url}/"
        )
        # The distro samples at 5 traces/s by default, from an empty bucket: a process's first
        # span may be dropped. Every span here, so the test shows the export, not the sampler.
        result = answer(start({"APPLICATIONINSIGHTS_CONNECTION_STRING": connection,
                               "OTEL_TRACES_SAMPLER": "always_on"}))  # fmt: skip
    assert result["done"] == "azure-monitor" and result["distro_imported"] is True
    items = [
        json.loads(line)
        for path, body in ingestion.posts
        if path.startswith("/v2.1/track")
        for line in _ndjson(body)
    ]
    names = {item["data"]["baseData"].get("name") for item in items}
    assert "once k-{n}" in names  # a dependency (InProc) in Application Insights
    metrics = {
        m["name"] for item in items if item["data"]["baseType"] == "MetricData"
        for m in item["data"]["baseData"]["metrics"]
    }  # fmt: skip
    assert {"app.emails", "blobsingleton.invocations"} <= metrics  # customMetrics


def _ndjson(body: bytes) -> list[str]:
    import gzip

    if body[:2] == b"\x1f\x8b":
        body = gzip.decompress(body)
    text = body.decode()
    if text.lstrip().startswith("["):
        return [json.dumps(item) for item in json.loads(text)]
    return [line for line in text.splitlines() if line.strip()]


def test_the_workers_sdk_is_kept_and_not_configured_twice() -> None:
    """PYTHON_ENABLE_OPENTELEMETRY non-empty: the worker configured the distro before
    it imported the app (stood for here by an SDK provider installed first)."""
    worker = (
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "trace.set_tracer_provider(TracerProvider())\n"
    )
    connection = f"InstrumentationKey={KEY}"
    result = answer(start({"APPLICATIONINSIGHTS_CONNECTION_STRING": connection}, worker))
    assert (result["done"], result["distro_imported"]) == ("worker", False)


def test_a_setting_whose_package_is_missing_fails_the_start_up_naming_both() -> None:
    missing = "import sys\nsys.modules['azure.monitor.opentelemetry'] = None\n"
    connection = f"InstrumentationKey={KEY}"
    ran = start({"APPLICATIONINSIGHTS_CONNECTION_STRING": connection}, missing)
    assert ran.returncode != 0
    assert ("TelemetryUnavailable: app setting APPLICATIONINSIGHTS_CONNECTION_STRING is set, "
            "but azure-monitor-opentelemetry is not installed") in ran.stderr  # fmt: skip
