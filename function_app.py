"""The function app: creates the app and registers each blueprint in functions/."""

from __future__ import annotations

import azure.functions as func

from functions import imports, jobs, notifications, ops

app = func.FunctionApp(http_auth_level=func.AuthLevel.FUNCTION)
app.register_functions(notifications.bp)
app.register_functions(jobs.bp)
app.register_functions(imports.bp)
app.register_functions(ops.bp)
