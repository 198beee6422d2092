"""HTTP triggers served like `func start`: http://127.0.0.1:{port}/api/{route}.

Route templates take `{param}`, `{param:constraint}`, `{param?}` and `{*rest}`. Keys come in
`?code=` or `x-functions-key`, checked as the host checks them: authLevel function takes the
function key or the admin (master) key, authLevel admin only the admin key.

Request bodies: as the host's Kestrel server, a `Content-Length` over the limit is answered
413 before the body is read (FUNCTIONS_REQUEST_BODY_SIZE_LIMIT, bytes; the host's default is
100 MB), and the connection is closed; a chunked body is read up to that limit, then refused
the same way. Framing is checked first, as Azure's front end and RFC 9112 do, and every
refusal closes the connection (what follows the headers cannot be told from the next request):
- a `Content-Length` that is not one field of decimal digits (`-1`, `abc`, `1e3`, two fields)
  is 400 Bad Request (RFC 9112 section 6.3: "the server MUST respond with a 400 (Bad Request)
  status code and then close the connection"); so is a `Transfer-Encoding` whose last coding
  is not `chunked`, or a malformed chunk;
- a POST or PUT with neither `Content-Length` nor chunked encoding is 411 Length Required, as
  the front end of *.azurewebsites.net answers it ("HTTP Error 411. The request must be
  chunked or have a content length.", HTTP.sys's page, quoted from a function app in
  MicrosoftDocs/azure-docs#58216); other methods without either have no body (RFC 9112 6.3).
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import re
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import azure.functions as func
from azure.functions import meta

from devhost.indexing import HttpTrigger, IndexedFunction
from devhost.invocation import invoke
from devhost.stats import WorkerStats

log = logging.getLogger("devhost.http")

#: The host's request body limit when FUNCTIONS_REQUEST_BODY_SIZE_LIMIT is not set (100 MB).
DEFAULT_BODY_LIMIT = 104_857_600

_PARAM = re.compile(r"\{(\*?)([A-Za-z_][A-Za-z0-9_]*)(?::([^}?=]+))?(=[^}]*)?(\?)?\}")
_CONSTRAINTS = {
    "int": r"-?\d+",
    "long": r"-?\d+",
    "bool": r"(?:true|false)",
    "guid": r"[0-9a-fA-F]{8}-?(?:[0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}",
    "alpha": r"[A-Za-z]+",
    "double": r"-?\d+(?:\.\d+)?",
    "float": r"-?\d+(?:\.\d+)?",
    "decimal": r"-?\d+(?:\.\d+)?",
}


def compile_route(template: str) -> re.Pattern[str]:
    """A regex for a route template; named groups are the route parameters."""
    pattern = ""
    segments = [s for s in template.strip("/").split("/") if s]
    for index, segment in enumerate(segments):
        lead = "/" if index else ""
        match = _PARAM.fullmatch(segment)
        if match:
            catch_all, name, constraint, _default, optional = match.groups()
            base = (constraint or "").split("(")[0].lower()
            inner = ".*" if catch_all else _CONSTRAINTS.get(base, r"[^/]+")
            group = f"(?P<{name}>{inner})"
            pattern += f"(?:{lead}{group})?" if optional or catch_all else lead + group
            continue
        parts, last = [], 0
        for param in _PARAM.finditer(segment):
            parts.append(re.escape(segment[last : param.start()]))
            parts.append(f"(?P<{param.group(2)}>[^/]+?)")
            last = param.end()
        parts.append(re.escape(segment[last:]))
        pattern += lead + "".join(parts)
    return re.compile(f"^{pattern}/?$", re.IGNORECASE)


@dataclass(frozen=True)
class Route:
    function: IndexedFunction
    trigger: HttpTrigger
    pattern: re.Pattern[str]

    def allows(self, method: str) -> bool:
        return self.trigger.methods is None or method.upper() in self.trigger.methods


def _default_params(template: str) -> dict[str, str]:
    """`{name=value}` defaults of a route template."""
    return {m.group(2): m.group(4)[1:] for m in _PARAM.finditer(template) if m.group(4) is not None}


def body_limit() -> int:
    """The request body limit the host applies (FUNCTIONS_REQUEST_BODY_SIZE_LIMIT)."""
    raw = os.environ.get("FUNCTIONS_REQUEST_BODY_SIZE_LIMIT", "")
    try:
        return int(raw)
    except ValueError:
        return DEFAULT_BODY_LIMIT  # the host ignores a value it cannot parse


class FramingError(ValueError):
    """A request whose body cannot be read as sent: answered `status`, connection closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


_DIGITS = re.compile(r"[0-9]+")
#: Methods whose requests HTTP.sys (Azure's front end) refuses without a length: 411.
LENGTH_REQUIRED = frozenset({"POST", "PUT"})


def read_body(handler: BaseHTTPRequestHandler, method: str, limit: int) -> bytes:
    """The request's body, read as its headers frame it (module docstring), at most `limit`
    bytes; a request framed wrongly, or over the limit, raises FramingError unread."""
    codings = [c.strip().lower() for v in handler.headers.get_all("Transfer-Encoding") or []
               for c in v.split(",") if c.strip()]  # fmt: skip
    lengths = handler.headers.get_all("Content-Length") or []
    if codings:
        if codings[-1] != "chunked":
            raise FramingError(400, "the last Transfer-Encoding is not chunked")
        if lengths:  # RFC 9112 6.1: Transfer-Encoding wins; the connection is not reused
            handler.close_connection = True
        return _read_chunked(handler.rfile, limit)
    if not lengths:
        if method in LENGTH_REQUIRED:
            raise FramingError(411, "the request must be chunked or have a content length")
        return b""
    digits = lengths[0].strip()
    if len(lengths) > 1 or not _DIGITS.fullmatch(digits):
        raise FramingError(400, "invalid Content-Length")
    length = int(digits) if len(digits) <= 18 else limit + 1  # past any limit: not parsed
    if length > limit:
        raise FramingError(413, f"Content-Length {length} over {limit}")
    return handler.rfile.read(length) if length else b""  # always read: keep-alive


_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,16})(?:;[^\r\n]*)?")


def _read_chunked(stream: Any, limit: int) -> bytes:
    """A chunked body (RFC 9112 section 7.1), refused (413) once it passes `limit` bytes."""
    body = bytearray()
    while True:
        line = stream.readline(1024).rstrip(b"\r\n")
        size = _CHUNK_SIZE.fullmatch(line)
        if size is None:
            raise FramingError(400, "invalid chunk size")
        length = int(size.group(1), 16)
        if length == 0:
            break
        if len(body) + length > limit:
            raise FramingError(413, f"chunked body over {limit}")
        chunk = stream.read(length)
        if len(chunk) != length or stream.read(2) != b"\r\n":
            raise FramingError(400, "chunk shorter than its size")
        body += chunk
    for _ in range(100):  # trailer fields, up to the empty line
        if stream.readline(8192) in (b"\r\n", b"\n", b""):
            return bytes(body)
    raise FramingError(400, "too many trailer fields")


def to_response(result: Any) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body from the `$return` datum the worker encoded (`http` or `string`)."""
    if isinstance(result, meta.Datum) and result.type == "http":
        value = result.value
        headers = {str(n): str(d.value) for n, d in value["headers"].items()}
        body = value["body"].value if value.get("body") is not None else b""
        if isinstance(body, str):
            body = body.encode()
        return int(value["status_code"].value), headers, body or b""
    if isinstance(result, meta.Datum) and result.type == "string":
        return 200, {"Content-Type": "text/plain; charset=utf-8"}, str(result.value).encode()
    raise TypeError(f"unsupported HTTP function result {result!r}")


class HttpHost:
    """A ThreadingHTTPServer dispatching to the app's HTTP functions."""

    def __init__(
        self,
        functions: list[IndexedFunction],
        port: int,
        function_key: str,
        stats: WorkerStats,
        route_prefix: str = "api",
        *,
        admin_key: str = "",
    ) -> None:
        self.routes = [
            Route(f, f.trigger, compile_route(f.trigger.route))
            for f in functions
            if isinstance(f.trigger, HttpTrigger)
        ]
        self.port = port
        self.prefix = f"/{route_prefix.strip('/')}" if route_prefix.strip("/") else ""
        self._key = function_key
        self._admin_key = admin_key
        self.body_limit = body_limit()
        self._stats = stats
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="http")

    def start(self) -> None:
        for route in self.routes:
            log.info(
                "%s: http://127.0.0.1:%d%s/%s [%s] auth=%s",
                route.function.name,
                self.port,
                self.prefix,
                route.trigger.route,
                ",".join(route.trigger.methods or ["*"]),
                route.trigger.auth_level,
            )
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def authorized(self, trigger: HttpTrigger, query: dict[str, str], headers: Any) -> bool:
        if trigger.auth_level == "anonymous":
            return True
        given = (query.get("code") or headers.get("x-functions-key") or "").encode()
        accepted = (
            [self._admin_key] if trigger.auth_level == "admin" else [self._key, self._admin_key]
        )
        # compare with every accepted key (no short cut), so timing tells nothing
        matches = [hmac.compare_digest(given, k.encode()) for k in accepted if k]
        return bool(given) and any(matches)

    def match(self, path: str) -> list[tuple[Route, dict[str, str]]]:
        if self.prefix:
            if not path.lower().startswith(self.prefix.lower()):
                return []
            path = path[len(self.prefix) :]
        path = path.lstrip("/")
        found = []
        for route in self.routes:
            m = route.pattern.match(path)
            if m:
                params = _default_params(route.trigger.route)
                params.update({k: unquote(v) for k, v in m.groupdict().items() if v is not None})
                found.append((route, params))
        return found

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        method = handler.command.upper()
        split = urlsplit(handler.path)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        try:
            body = read_body(handler, method, self.body_limit)
        except FramingError as refused:
            log.info("%d %s %s: %s", refused.status, method, split.path, refused)
            handler.close_connection = True
            headers = {"Connection": "close"}
            if refused.status == 413:  # as Kestrel: no body
                return _send(handler, 413, headers, b"")
            return _send(handler, refused.status, {**headers, "Content-Type": "application/json"},
                         json.dumps({"error": str(refused)}).encode())  # fmt: skip
        candidates = self.match(split.path)
        if not candidates:
            return _reply(handler, 404, {"error": "no function matches this route"})
        allowed = [(r, p) for r, p in candidates if r.allows(method)]
        if not allowed:
            return _reply(handler, 405, {"error": f"method {method} not allowed"})
        route, params = allowed[0]
        if not self.authorized(route.trigger, query, handler.headers):
            level = route.trigger.auth_level
            log.info(
                "%s: 401 %s %s (missing or wrong %s key)", route.function.name, method, split.path,
                level,
            )  # fmt: skip
            needed = "the admin (master) key" if level == "admin" else "a function key"
            return _reply(handler, 401, {"error": f"{needed} is required"})
        request = func.HttpRequest(
            method,
            f"http://127.0.0.1:{self.port}{handler.path}",
            headers={k.lower(): v for k, v in handler.headers.items()},
            params=query,
            route_params=params,
            body=body,
        )
        name = route.function.name
        self._stats.started(name)
        ok = False
        try:
            result = invoke(
                route.function.user_function, {route.function.arg_name: request}, function_name=name
            )
            status, headers, payload = to_response(result)
            ok = True
        except Exception as error:
            log.exception("%s: %s %s failed", name, method, split.path)
            status, headers = 500, {"Content-Type": "application/json"}
            payload = json.dumps({"error": type(error).__name__}).encode()
        finally:
            self._stats.finished(name, ok)
        log.info("%s: %d %s %s", name, status, method, split.path)
        _send(handler, status, headers, payload)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        host = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _dispatch(self) -> None:
                try:
                    host.handle(self)
                except Exception:
                    log.exception("HTTP handler error")

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _dispatch

            def log_message(self, format: str, *args: Any) -> None:
                pass  # one line per request is logged by HttpHost.handle

        return Handler


def _send(
    handler: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes
) -> None:
    handler.send_response(status)
    for name, value in headers.items():
        if name.lower() != "content-length":
            handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(body)


def _reply(handler: BaseHTTPRequestHandler, status: int, payload: dict[str, str]) -> None:
    _send(handler, status, {"Content-Type": "application/json"}, json.dumps(payload).encode())
