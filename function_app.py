"""The function app: creates the app and registers each blueprint in functions/."""

from __future__ import annotations

import azure.functions as func

from functions import imports, jobs, notifications, ops
from shared.app_logging import quiet_storage_http_logging

quiet_storage_http_logging()  # the worker ships INFO records; azure-core logs each request there

app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)
app.register_functions(notifications.bp)
app.register_functions(jobs.bp)
app.register_functions(imports.bp)
app.register_functions(ops.bp)
