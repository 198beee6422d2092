"""The function app: creates the app and registers each blueprint in functions/.

Telemetry is configured first (shared.telemetry_setup: Application Insights and/or an OTLP
endpoint, from app settings; nothing without them), so the storage clients the functions'
modules build are traced from the start."""

from __future__ import annotations

from shared.telemetry_setup import configure_telemetry

configure_telemetry()

import azure.functions as func  # noqa: E402

from functions import imports, jobs, notifications, ops  # noqa: E402
from shared.app_logging import quiet_storage_http_logging  # noqa: E402

quiet_storage_http_logging()  # the worker ships INFO records; azure-core logs each request there

app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)
app.register_functions(notifications.bp)
app.register_functions(jobs.bp)
app.register_functions(imports.bp)
app.register_functions(ops.bp)
