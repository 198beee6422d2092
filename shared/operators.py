"""Who may operate the app: read the operator views, see run outcomes, break and reset.

The ops routes are anonymous at the host (neither a function key nor the master key opens
them: the master key also manages the host's keys, and a page URL carrying `?code=` leaks
into browser history and proxy logs). Each request is authorised here, by an identity:

1. App Service authentication ("Easy Auth") in front of the app. The platform signs the
   caller in (Microsoft Entra ID) before the request reaches the app and passes the verified
   identity in `x-ms-client-principal`: base64 JSON `{"auth_typ", "claims": [{"typ", "val"}],
   "name_typ", "role_typ"}`. Clients cannot set that header while authentication is on, but
   they can when it is off, so the app believes it only when both say authentication is in
   front: the deployment (OPS_EASY_AUTH=true) and the platform (WEBSITE_AUTH_ENABLED=True,
   which App Service sets when authentication is enabled). OPS_EASY_AUTH=true without the
   platform's word is refused (503) and logged, never trusted. The caller's app roles (the
   `roles` claim of the Entra app registration) decide: OPS_READ_ROLE ("Ops.Read") reads,
   OPS_OPERATE_ROLE ("Ops.Operate") also breaks, resets and sees run outcomes.
2. Operator keys, for scripts: OPS_OPERATOR_KEYS = "alice=<sha256 hex>,deploy=<sha256 hex>",
   named keys of which the settings hold only the SHA-256, sent in the `X-Operator-Key`
   header, never in a URL (not in `Authorization`: App Service authentication validates a
   bearer token there and would refuse a key). A key operates (and reads). `python -m
   shared.operators new-key NAME` makes one. Not the master key, not a function key: a
   separate secret per operator, revoked by deleting its entry.

The audit's "who" comes from what was verified: the principal's name and object id, or the
key's name; never from a header a client can send (`x-ms-client-principal-name` alone is
ignored). A request with a key in its URL (`?code=`) is refused outright (400) so that such a
link never works and is noticed.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import hmac
import json
import logging
import re
import secrets
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from shared.settings import parse_flag, setting

log = logging.getLogger(__name__)

PRINCIPAL_HEADER = "x-ms-client-principal"
KEY_HEADER = "x-operator-key"
DEFAULT_READ_ROLE = "Ops.Read"
DEFAULT_OPERATE_ROLE = "Ops.Operate"
OBJECT_ID_CLAIMS = ("http://schemas.microsoft.com/identity/claims/objectidentifier", "oid")
LOGIN_PATH = "/.auth/login/aad"
_KEY_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
#: A principal header larger than this is not one the platform wrote.
MAX_PRINCIPAL_BYTES = 64 * 1024


class Access(Enum):
    READ = "read"
    OPERATE = "operate"


@dataclass(frozen=True)
class Operator:
    """A verified caller: who (for the audit) and whether they may operate."""

    who: str
    can_operate: bool


class NotAuthorized(Exception):
    """The request is not (or cannot be) authorised: `status` is the HTTP answer."""

    def __init__(self, status: int, message: str, *, login_url: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.login_url = login_url


@dataclass(frozen=True)
class OperatorSettings:
    """OPS_EASY_AUTH, OPS_READ_ROLE, OPS_OPERATE_ROLE, OPS_OPERATOR_KEYS (see the module doc),
    and the platform's WEBSITE_AUTH_ENABLED."""

    easy_auth: bool = False
    platform_auth: bool = False
    read_role: str = DEFAULT_READ_ROLE
    operate_role: str = DEFAULT_OPERATE_ROLE
    keys: tuple[tuple[str, str], ...] = ()  # (name, sha256 hex)

    @classmethod
    def from_env(cls) -> OperatorSettings:
        return cls(
            easy_auth=parse_flag(setting("OPS_EASY_AUTH"), "OPS_EASY_AUTH"),
            platform_auth=(setting("WEBSITE_AUTH_ENABLED") or "").strip().lower() == "true",
            read_role=setting("OPS_READ_ROLE") or DEFAULT_READ_ROLE,
            operate_role=setting("OPS_OPERATE_ROLE") or DEFAULT_OPERATE_ROLE,
            keys=parse_keys(setting("OPS_OPERATOR_KEYS") or ""),
        )


def parse_keys(raw: str) -> tuple[tuple[str, str], ...]:
    """The (name, sha256) pairs of OPS_OPERATOR_KEYS; `ValueError` naming the setting."""
    keys: list[tuple[str, str]] = []
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        name, _, digest = entry.partition("=")
        name, digest = name.strip(), digest.strip().lower()
        if not _KEY_NAME.fullmatch(name) or not _SHA256.fullmatch(digest):
            raise ValueError(
                "app setting OPS_OPERATOR_KEYS: each entry is NAME=<SHA-256 of the key, 64 hex "
                "digits> (python -m shared.operators new-key NAME)"
            )
        keys.append((name, digest))
    return tuple(keys)


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def authorize(
    headers: Mapping[str, str],
    params: Mapping[str, str],
    need: Access,
    settings: OperatorSettings | None = None,
) -> Operator:
    """The verified operator behind a request, allowed `need`; `NotAuthorized` otherwise."""
    if "code" in params:
        raise NotAuthorized(
            400,
            "keys are never accepted in a URL (?code=): a URL ends up in browser history and "
            "proxy logs. Sign in, or send an operator key in the X-Operator-Key header; "
            "rotate the key that was in the URL",
        )
    settings = settings or OperatorSettings.from_env()
    operator = _by_key(headers, settings) or _by_principal(headers, settings)
    if operator is None:
        login = LOGIN_PATH if settings.easy_auth and settings.platform_auth else None
        raise NotAuthorized(401, _how_to_sign_in(settings), login_url=login)
    if need == Access.OPERATE and not operator.can_operate:
        raise NotAuthorized(
            403, f"{operator.who} may read but not operate: that needs the app role "
            f"{settings.operate_role} or an operator key",
        )  # fmt: skip
    return operator


def _how_to_sign_in(settings: OperatorSettings) -> str:
    ways = []
    if settings.easy_auth:
        ways.append(f"sign in (App Service authentication, app role {settings.read_role})")
    if settings.keys:
        ways.append("send an operator key in the X-Operator-Key header")
    if not ways:
        return (
            "operator access is not configured: set OPS_EASY_AUTH (with App Service "
            "authentication) or OPS_OPERATOR_KEYS"
        )
    return "operator credentials required: " + ", or ".join(ways)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None


def _by_key(headers: Mapping[str, str], settings: OperatorSettings) -> Operator | None:
    key = (_header(headers, KEY_HEADER) or "").strip()
    if not key:
        return None
    digest = key_digest(key)
    found = None
    for name, expected in settings.keys:  # every entry compared: the timing tells nothing
        if hmac.compare_digest(digest, expected):
            found = name
    if found is None:
        raise NotAuthorized(401, "the operator key is not one of OPS_OPERATOR_KEYS")
    return Operator(f"operator key {found!r}", can_operate=True)


def _by_principal(headers: Mapping[str, str], settings: OperatorSettings) -> Operator | None:
    encoded = _header(headers, PRINCIPAL_HEADER)
    if not settings.easy_auth:
        return None  # the header means nothing unless authentication is known to be in front
    if not settings.platform_auth:
        log.error("OPS_EASY_AUTH=true but the platform says authentication is off "
                  "(WEBSITE_AUTH_ENABLED): the principal header is not trusted")  # fmt: skip
        raise NotAuthorized(
            503, "OPS_EASY_AUTH is set but App Service authentication is not enabled "
            "(WEBSITE_AUTH_ENABLED): sign-in cannot be trusted",
        )  # fmt: skip
    if not encoded:
        return None
    claims, name_type, role_type = _decode(encoded)
    roles = {value for typ, value in claims if typ in (role_type, "roles")}
    if settings.operate_role not in roles and settings.read_role not in roles:
        raise NotAuthorized(403, f"signed in without the app role {settings.read_role}")
    name = next((v for t, v in claims if t == name_type), None) or next(
        (v for t, v in claims if t in ("name", "preferred_username")), "unnamed"
    )
    object_id = next((v for t, v in claims if t in OBJECT_ID_CLAIMS), None)
    who = f"{name} (Entra object {object_id})" if object_id else name
    return Operator(who, can_operate=settings.operate_role in roles)


def _decode(encoded: str) -> tuple[list[tuple[str, str]], str, str]:
    """(claims as (type, value), the name claim's type, the role claim's type)."""
    try:
        if len(encoded) > MAX_PRINCIPAL_BYTES:
            raise ValueError("too large")
        data = json.loads(base64.b64decode(encoded, validate=True))
        claims = [(str(c["typ"]), str(c["val"])) for c in data.get("claims") or []]
        return claims, str(data.get("name_typ") or "name"), str(data.get("role_typ") or "roles")
    except (ValueError, TypeError, KeyError, AttributeError, binascii.Error):
        raise NotAuthorized(401, "the client principal header is not readable") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shared.operators")
    commands = parser.add_subparsers(dest="command", required=True)
    new = commands.add_parser("new-key", help="a new operator key and its OPS_OPERATOR_KEYS entry")
    new.add_argument("name", help="whose key (letters, digits, . _ -)")
    args = parser.parse_args(argv)
    if not _KEY_NAME.fullmatch(args.name):
        parser.error("the name is 1 to 64 letters, digits, '.', '_' or '-'")
    key = secrets.token_urlsafe(32)
    print(f"key (give it to {args.name}; it is not stored anywhere): {key}")
    print(
        f"OPS_OPERATOR_KEYS entry (comma-separated with the others): {args.name}={key_digest(key)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
