"""The operator's HTTP API and status page.

    GET  /api/locks       ?prefix=&limit=&next=          every lock: holder, token, since
    GET  /api/runs        ?prefix=&state=&limit=&next=   run-once records
    GET  /api/jobs        ?prefix=&limit=&next=          batch jobs: progress, callback state
    GET  /api/imports     ?prefix=&limit=&next=          each account's last import and report
    POST /api/locks/{key}/break  ?scope= {"reason": "..."}  admin key; audited; the token
    POST /api/runs/{key}/reset   ?scope= {"reason": "..."}  admin key; audited

A lock or record is a function's own (`scope`, as the listings show it) or the app's.
    GET  /api/status                                     the status page (reads the above)

Reads need a function key; changes need the admin (master) key. Keys in the route are user
input: they are validated by the library's key rules before they name a blob, and anything
wrong is a 400 saying what.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import azure.functions as func
from blobsingleton import ops
from blobsingleton.config import validate_key
from blobsingleton.errors import InvalidKey

from shared import ops as app_ops

log = logging.getLogger(__name__)

STATUS_PAGE = Path(__file__).resolve().parent / "static" / "status.html"

bp = func.Blueprint()


def _json(status: int, body: Any) -> func.HttpResponse:
    return func.HttpResponse(
        json.dumps(body, default=str),
        status_code=status,
        mimetype="application/json",
        headers={"Cache-Control": "no-store"},
    )


def _answer(action: Callable[[], Any]) -> func.HttpResponse:
    """Run `action`; map what an operator got wrong to 400/404/409 with a clear message."""
    try:
        result = action()
    except (InvalidKey, ops.InvalidRequest) as error:
        return _json(400, {"error": str(error)})
    except ops.NotFound as error:
        return _json(404, {"error": str(error)})
    except ops.OpsError as error:
        return _json(409, {"error": str(error)})
    return _json(200, result.to_dict() if isinstance(result, ops.Page) else result)


def _query(req: func.HttpRequest) -> tuple[str, int, str | None]:
    limit = ops.validate_limit(req.params.get("limit"))
    return req.params.get("prefix") or "", limit, req.params.get("next") or None


def _change_request(req: func.HttpRequest) -> tuple[str, str]:
    """The reason from the JSON body, and who asks (the signed-in user behind Easy Auth)."""
    try:
        body = req.get_json()
    except ValueError as error:
        raise ops.InvalidRequest('the body must be JSON: {"reason": "..."}') from error
    if not isinstance(body, dict):
        raise ops.InvalidRequest('the body must be a JSON object: {"reason": "..."}')
    reason = ops.validate_reason(body.get("reason"))
    principal = req.headers.get("x-ms-client-principal-name")
    return reason, f"{principal} (admin key)" if principal else "admin key"


def _key(req: func.HttpRequest) -> str:
    return validate_key(req.route_params.get("key"))


def _scope(req: func.HttpRequest) -> str | None:
    """`?scope=`: the function whose own lock or record it is (as listings show it)."""
    return req.params.get("scope") or None


@bp.route(route="locks", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
def ops_locks(req: func.HttpRequest) -> func.HttpResponse:
    """Every lock, held or free, filtered by key prefix, one page at a time."""
    return _answer(lambda: ops.list_locks(*_query(req)))


@bp.route(route="runs", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
def ops_runs(req: func.HttpRequest) -> func.HttpResponse:
    """Run-once records, filtered by key prefix and state."""

    def page() -> ops.Page:
        prefix, limit, marker = _query(req)
        return ops.list_runs(prefix, req.params.get("state") or None, limit, marker)

    return _answer(page)


@bp.route(route="jobs", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
def ops_jobs(req: func.HttpRequest) -> func.HttpResponse:
    """Batch jobs with progress and callback state."""
    return _answer(lambda: app_ops.list_jobs(*_query(req)))


@bp.route(route="imports", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
def ops_imports(req: func.HttpRequest) -> func.HttpResponse:
    """Each account's last import run with its report (counts, rejected files, errors)."""
    return _answer(lambda: app_ops.list_imports(*_query(req)))


@bp.route(route="locks/{key}/break", methods=["POST"], auth_level=func.AuthLevel.ADMIN)
def ops_break_lock(req: func.HttpRequest) -> func.HttpResponse:
    """Break a held lock now; the answer's token is the one the next holder will exceed."""

    def act() -> dict[str, Any]:
        key = _key(req)
        reason, by = _change_request(req)
        return ops.break_lock(key, reason, by, scope=_scope(req))

    return _answer(act)


@bp.route(route="runs/{key}/reset", methods=["POST"], auth_level=func.AuthLevel.ADMIN)
def ops_reset_run(req: func.HttpRequest) -> func.HttpResponse:
    """Free a run-once key so it runs again (for example one account's import tonight)."""

    def act() -> dict[str, Any]:
        key = _key(req)
        reason, by = _change_request(req)
        return ops.reset_run(key, reason, by, scope=_scope(req))

    return _answer(act)


@bp.route(route="status", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
def ops_status_page(req: func.HttpRequest) -> func.HttpResponse:
    """The status page: static HTML and JS that reads the API above with the same key."""
    return func.HttpResponse(
        STATUS_PAGE.read_bytes(),
        mimetype="text/html",
        charset="utf-8",
        headers={
            "Cache-Control": "no-store",
            "Content-Security-Policy": "default-src 'self'; script-src 'unsafe-inline';"
            " style-src 'unsafe-inline'; connect-src 'self'",
            "Referrer-Policy": "no-referrer",
        },
    )
