"""The operator's HTTP API and status page.

    GET  /api/locks       ?prefix=&limit=&next=          every lock: holder, token, since
    GET  /api/runs        ?prefix=&state=&limit=&next=   run-once records (outcomes: operators)
    GET  /api/jobs        ?prefix=&limit=&next=          batch jobs: progress, callback state
    GET  /api/imports     ?prefix=&limit=&next=          each account's last import and report
    GET  /api/summary                                    the last hour's figures, from the stores
    GET  /api/timers                                     each timer's ledger: last run, next due,
                                                         missed, skipped, late (reported as read)
    GET  /api/overview                                   what needs a person, and counts per state
    POST /api/locks/{key}/break  ?scope= {"reason": "..."}  operators; audited; the token
    POST /api/runs/{key}/reset   ?scope= {"reason": "..."}  operators; audited
    GET  /api/status                                     the status page (reads the above)
    GET  /api/status/{asset}                             its script and style sheet

Every route is anonymous at the host and authorised in code by an identity (shared.operators):
an App Service authentication principal with an app role, or an operator key in the
X-Operator-Key header; never a function key, never the master key, never a key in a URL
(refused, 400). Reads need the read role; break, reset and run outcomes the operate role (or
an operator key). The page and its assets hold no data and are served to anyone.

Keys in the route are user input: they are validated by the library's key rules before they
name a blob, and anything wrong is a 400 saying what. Every answer carries no-store,
nosniff and a Content-Security-Policy that forbids framing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import azure.functions as func
from blobsingleton import ops
from blobsingleton.config import scope_of, validate_key
from blobsingleton.errors import InvalidKey

from functions import imports, jobs, notifications
from shared import ops as app_ops
from shared import ops_problems, ops_summary, ops_tally
from shared.imports.fanout import QUEUE as IMPORT_QUEUE
from shared.operators import Access, NotAuthorized, Operator, authorize
from shared.poison import poison_queue_name

log = logging.getLogger(__name__)

STATIC = Path(__file__).resolve().parent / "static"
STATUS_PAGE = STATIC / "status.html"
#: The page's assets by the name in its route, with their media types (nothing else is served).
ASSETS = {"status.js": "text/javascript", "status.css": "text/css"}

#: Headers of every answer: nothing cached, nothing sniffed, never framed.
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}
API_CSP = "default-src 'none'; frame-ancestors 'none'"
PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)

bp = func.Blueprint()


def _json(status: int, body: Any) -> func.HttpResponse:
    return func.HttpResponse(
        json.dumps(body, default=str),
        status_code=status,
        mimetype="application/json",
        headers={**SECURITY_HEADERS, "Content-Security-Policy": API_CSP},
    )


def _refused(error: NotAuthorized) -> func.HttpResponse:
    body: dict[str, Any] = {"error": error.message}
    if error.login_url:
        body["login_url"] = error.login_url
    return _json(error.status, body)


def _answer(
    req: func.HttpRequest, need: Access, action: Callable[[Operator], Any]
) -> func.HttpResponse:
    """Authorise, then run `action`; map what an operator got wrong to 400/404/409."""
    try:
        operator = authorize(req.headers, req.params, need)
    except NotAuthorized as error:
        return _refused(error)
    try:
        result = action(operator)
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


def _reason(req: func.HttpRequest) -> str:
    """The reason from the JSON body. JSON only: a cross-site form cannot send it without a
    CORS preflight, so a signed-in operator's browser cannot be made to break a lock."""
    media = (req.headers.get("content-type") or "").split(";")[0].strip().lower()
    if media != "application/json":
        raise ops.InvalidRequest("the body must be JSON (Content-Type: application/json)")
    return app_ops.ActionRequest.parse(req.get_body()).reason


def _key(req: func.HttpRequest) -> str:
    return validate_key(req.route_params.get("key"))


def _scope(req: func.HttpRequest) -> str | None:
    """`?scope=`: the function whose own lock or record it is (as listings show it); none for
    the app's."""
    return req.params.get("scope") or None


def _held(req: func.HttpRequest) -> bool | None:
    value = (req.params.get("held") or "").lower()
    if value not in ("", "true", "false"):
        raise ops.InvalidRequest(f"held must be true or false, not {value[:20]!r}")
    return None if not value else value == "true"


@bp.route(route="locks", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
def ops_locks(req: func.HttpRequest) -> func.HttpResponse:
    """Every lock (or only held or free ones: `held=`), filtered by key prefix, one page at a
    time."""
    return _answer(req, Access.READ, lambda _: ops.list_locks(*_query(req), held=_held(req)))


@bp.route(route="runs", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
def ops_runs(req: func.HttpRequest) -> func.HttpResponse:
    """Run-once records, filtered by key prefix and state; outcomes for operators only."""

    def page(operator: Operator) -> ops.Page:
        prefix, limit, marker = _query(req)
        state = req.params.get("state") or None
        return ops.list_runs(prefix, state, limit, marker, outcomes=operator.can_operate)

    return _answer(req, Access.READ, page)


@bp.route(route="jobs", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
def ops_jobs(req: func.HttpRequest) -> func.HttpResponse:
    """Batch jobs with progress and callback state."""
    return _answer(req, Access.READ, lambda _: app_ops.list_jobs(*_query(req)))


@bp.route(route="imports", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
def ops_imports(req: func.HttpRequest) -> func.HttpResponse:
    """Each account's last import run with its report (counts, rejected files, errors)."""
    return _answer(req, Access.READ, lambda _: app_ops.list_imports(*_query(req)))


#: Run-once records the summary names by flow (the others are counted together).
FLOWS: ops_summary.Flows = {
    notifications.RECORD_SCOPE: ("Emails", "emails sent"),
    scope_of(imports.fan_out_night): ("Imports", "nightly fan-outs"),
}


#: What resetting a completed record of a function does, said before the reason is asked for.
RESET_EFFECTS = {
    notifications.RECORD_SCOPE: "the event's email is sent again",
    scope_of(imports.fan_out_night): "that night's imports are enqueued again",
}


@bp.route(route="summary", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
def ops_summary_last_hour(req: func.HttpRequest) -> func.HttpResponse:
    """The last hour's figures, each with the store it is read from (counts only)."""
    return _answer(req, Access.READ, lambda _: ops_summary.last_hour(FLOWS))


#: The app's scheduled functions (their ledgers: /api/timers, `python -m shared.ops timers`).
TIMERS = (imports.fan_out_night, jobs.sweep)


@bp.route(route="timers", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
def ops_timers(req: func.HttpRequest) -> func.HttpResponse:
    """Each timer's last run, next due and every missed or skipped occurrence; a timer late
    past its grace period is `late` and reported (event record, metric) as it is read."""
    return _answer(req, Access.READ, lambda _: app_ops.list_timers(TIMERS))


#: The queues whose poison queues the overview counts (the app's queue triggers).
POISON_QUEUES = (notifications.QUEUE, IMPORT_QUEUE, jobs.UNITS_QUEUE, jobs.ANNOUNCE_QUEUE)
#: A lost lease is logged by the library on its holder: each instance keeps a note of it too,
#: and tallies the library's events per 5 minutes for the page's charts.
ops_problems.install_lost_lease_notes()
ops_tally.install()


@bp.route(route="overview", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
def ops_overview(req: func.HttpRequest) -> func.HttpResponse:
    """What needs a person (held locks, in-progress and expired runs, failing callbacks,
    poison messages, rejected import rows, lost leases) and counts per state."""
    queues = [poison_queue_name(q) for q in POISON_QUEUES]
    return _answer(
        req, Access.READ, lambda _: {**app_ops.overview(queues), "reset_effects": RESET_EFFECTS}
    )


@bp.route(route="locks/{key}/break", methods=["POST"], auth_level=func.AuthLevel.ANONYMOUS)
def ops_break_lock(req: func.HttpRequest) -> func.HttpResponse:
    """Break a held lock now; the answer's token is the one the next holder will exceed."""
    return _answer(
        req, Access.OPERATE,
        lambda who: ops.break_lock(_key(req), _reason(req), who.who, scope=_scope(req)),
    )  # fmt: skip


@bp.route(route="runs/{key}/reset", methods=["POST"], auth_level=func.AuthLevel.ANONYMOUS)
def ops_reset_run(req: func.HttpRequest) -> func.HttpResponse:
    """Free a run-once key so it runs again (for example one account's import tonight)."""
    return _answer(
        req, Access.OPERATE,
        lambda who: ops.reset_run(_key(req), _reason(req), who.who, scope=_scope(req)),
    )  # fmt: skip


@bp.route(route="status", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
def ops_status_page(req: func.HttpRequest) -> func.HttpResponse:
    """The status page: static HTML; its script reads the API above as the signed-in user
    (or with the operator key typed into it). A key in its URL is refused, not used."""
    if "code" in req.params:
        return _refused(NotAuthorized(400, "keys are never accepted in a URL: open /api/status "
                                      "without ?code= and rotate that key"))  # fmt: skip
    return _static(STATUS_PAGE.read_bytes(), "text/html")


@bp.route(route="status/{asset}", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
def ops_status_asset(req: func.HttpRequest) -> func.HttpResponse:
    """The status page's script and style sheet (external: the page allows no inline code)."""
    name = req.route_params.get("asset") or ""
    if name not in ASSETS:
        return _json(404, {"error": f"no asset {name[:64]!r}"})
    return _static((STATIC / name).read_bytes(), ASSETS[name])


def _static(body: bytes, mimetype: str) -> func.HttpResponse:
    return func.HttpResponse(
        body,
        mimetype=mimetype,
        charset="utf-8",
        headers={**SECURITY_HEADERS, "Content-Security-Policy": PAGE_CSP},
    )
