"""The SQLAlchemy engine of an account's database source, and its Microsoft Entra tokens.

With IMPORT_DATABASE_{A}_AUTH=entra the URL carries no password: each new connection gets
a token from `azure-identity` through SQLAlchemy's `do_connect` event (`EntraTokens`),
fetched again when the one in hand is within REFRESH_MARGIN_S of its expiry, so a
connection opened at any time of a long run logs in with a valid token (a database checks
the token at login only; an open connection stays open past its expiry).

    PostgreSQL (Azure Database for PostgreSQL flexible server): the token is the password;
        scope https://ossrdbms-aad.database.windows.net/.default
    SQL Server (Azure SQL, mssql+pyodbc): the token goes in the ODBC connection attribute
        SQL_COPT_SS_ACCESS_TOKEN; scope https://database.windows.net/.default

The credential is `DefaultAzureCredential` (the Function App's managed identity in Azure,
AZURE_CLIENT_ID naming a user-assigned one; a developer's Azure CLI login locally); tests
inject their own (`engine_for(source, credential=...)`).

Errors are described by `describe_error`: the driver's first line, never the URL's
password nor a token (both are scrubbed should a driver ever echo them), never a statement
or its parameters.
"""

from __future__ import annotations

import struct
import threading
import time
import weakref
from typing import Any

from azure.core.credentials import AccessToken, TokenCredential
from sqlalchemy import event
from sqlalchemy.engine import Engine, create_engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from shared.imports.db_config import DatabaseSource

#: A token is fetched again when it expires within this many seconds.
REFRESH_MARGIN_S = 300
POSTGRES_SCOPE = "https://ossrdbms-aad.database.windows.net/.default"
AZURE_SQL_SCOPE = "https://database.windows.net/.default"
#: msodbcsql's connection attribute for an access token (sqlncli.h).
SQL_COPT_SS_ACCESS_TOKEN = 1256

_engines: dict[tuple[str, str], Engine] = {}
_tokens: weakref.WeakKeyDictionary[Engine, EntraTokens] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


class EntraTokens:
    """Tokens of one scope from a `TokenCredential`, fetched when none is valid for at least
    `margin_s` more seconds; thread-safe (a pool opens connections on any thread)."""

    def __init__(self, credential: TokenCredential, scope: str,
                 margin_s: float = REFRESH_MARGIN_S) -> None:  # fmt: skip
        self.credential = credential
        self.scope = scope
        self.margin_s = margin_s
        self.fetched = 0  # tokens fetched so far
        self._token: AccessToken | None = None
        self._lock = threading.Lock()

    def token(self) -> str:
        with self._lock:
            if self._token is None or self._token.expires_on - time.time() < self.margin_s:
                self._token = self.credential.get_token(self.scope)
                self.fetched += 1
            return self._token.token

    def secrets(self) -> list[str]:
        """What must never be shown: the token in hand."""
        return [self._token.token] if self._token is not None else []


def scope_of(source: DatabaseSource) -> str:
    backend = source.url.get_backend_name()
    if backend == "postgresql":
        return POSTGRES_SCOPE
    if backend == "mssql":
        return AZURE_SQL_SCOPE
    raise ValueError(f"app setting {source.setting_name('AUTH')}=entra: Microsoft Entra tokens are "
                     f"for postgresql and mssql URLs, not {backend}")  # fmt: skip


def supply_token(tokens: EntraTokens, backend: str, cparams: dict[str, Any]) -> None:
    """Put a valid token where the driver `backend` logs in with it."""
    token = tokens.token()
    if backend == "mssql":
        raw = token.encode("utf-16-le")
        cparams.pop("password", None)
        attrs = dict(cparams.get("attrs_before") or {})
        attrs[SQL_COPT_SS_ACCESS_TOKEN] = struct.pack(f"<I{len(raw)}s", len(raw), raw)
        cparams["attrs_before"] = attrs
    else:
        cparams["password"] = token


def _connect_args(source: DatabaseSource) -> dict[str, Any]:
    backend, timeout = source.url.get_backend_name(), source.timeout_s
    if backend == "postgresql":
        return {"connect_timeout": timeout, "options": f"-c statement_timeout={timeout * 1000}"}
    if backend in ("sqlite", "mssql"):
        return {"timeout": timeout}
    return {}


def engine_for(source: DatabaseSource, *, credential: TokenCredential | None = None) -> Engine:
    """The source's engine (one per URL, reused by later runs of this process)."""
    cache_key = (source.account, source.url.render_as_string(hide_password=False) + source.auth)
    with _lock:
        engine = _engines.get(cache_key)
        if engine is not None and credential is None:
            return engine
        engine = create_engine(source.url, connect_args=_connect_args(source),
                               pool_pre_ping=True, hide_parameters=True)  # fmt: skip
        if source.auth == "entra":
            if credential is None:
                from azure.identity import DefaultAzureCredential

                credential = DefaultAzureCredential()
            tokens = EntraTokens(credential, scope_of(source))
            backend = source.url.get_backend_name()
            _tokens[engine] = tokens

            @event.listens_for(engine, "do_connect")
            def _token(dialect: Any, conn_rec: Any, cargs: Any, cparams: dict[str, Any]) -> None:
                supply_token(tokens, backend, cparams)

        _engines[cache_key] = engine
        return engine


def tokens_of(engine: Engine) -> EntraTokens | None:
    """The engine's token source (AUTH=entra), else None."""
    return _tokens.get(engine)


def dispose_all() -> None:
    """Close every pooled connection (tests; a process about to exit)."""
    with _lock:
        for engine in _engines.values():
            engine.dispose()
        _engines.clear()


def describe_error(
    error: BaseException, source: DatabaseSource, engine: Engine | None = None
) -> str:
    """One line about a database error: its class and the driver's first line, without the
    statement, its parameters, the URL's password or a token."""
    if isinstance(error, DBAPIError) and error.orig is not None:
        name, text = type(error.orig).__name__, str(error.orig)
    elif isinstance(error, SQLAlchemyError):
        name, text = type(error).__name__, str(error).split("\n(Background")[0]
    else:
        name, text = type(error).__name__, str(error)
    first = (text.strip().splitlines() or [""])[0][:300]
    secrets = [source.url.password or ""]
    tokens = _tokens.get(engine) if engine is not None else None
    if tokens is not None:
        secrets += tokens.secrets()
    for secret in secrets:
        if secret:
            first = first.replace(str(secret), "***")
    return f"{name}: {first}" if first else name
