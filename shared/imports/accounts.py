"""Account names: validated before they become a lease key, a blob prefix or a PartitionKey.

An account name comes from a blob prefix, an app setting or an HTTP route, so it is untrusted.
Only `[A-Za-z0-9_-]`, starting with a letter or digit, at most 63 characters: that rules out
path traversal (`../x`), control characters, and every character Table Storage forbids in
keys (`/ \\ # ?`), and it keeps `{account}/...` blob names unambiguous.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from shared import settings

log = logging.getLogger("shared.imports")

MAX_ACCOUNT_LENGTH = 63
_ACCOUNT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


class InvalidAccount(ValueError):
    """An account name that cannot be used; `reason` says why without echoing the raw value."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"invalid account name: {reason}")
        self.reason = reason


def validate_account(name: object) -> str:
    """Return `name` if it is a usable account name; raise `InvalidAccount` otherwise."""
    if not isinstance(name, str):
        raise InvalidAccount(f"must be a string, not {type(name).__name__}")
    if not name:
        raise InvalidAccount("must not be empty")
    if len(name) > MAX_ACCOUNT_LENGTH:
        raise InvalidAccount(f"is {len(name)} characters long, the limit is {MAX_ACCOUNT_LENGTH}")
    if any(not ch.isprintable() for ch in name):
        raise InvalidAccount("contains control characters")
    if "/" in name or "\\" in name or ".." in name:
        raise InvalidAccount("contains a path separator or '..'")
    if not _ACCOUNT.fullmatch(name):
        raise InvalidAccount(
            "may hold only letters, digits, '-' and '_', starting with a letter or digit"
        )
    return name


def configured_accounts() -> list[str] | None:
    """App setting IMPORT_ACCOUNTS (comma-separated), or None when unset.

    An invalid entry fails loudly: a typo in configuration must not silently skip an account.
    """
    raw = settings.setting("IMPORT_ACCOUNTS")
    if raw is None:
        return None
    names = [part.strip() for part in raw.split(",") if part.strip()]
    return sorted({validate_account(name) for name in names})


def discovered_accounts(container: Any) -> tuple[list[str], list[str]]:
    """Top-level prefixes of the imports container: (valid account names, rejected prefixes).

    Rejected prefixes are returned (not raised) so one odd folder cannot stop every account.
    """
    valid: list[str] = []
    rejected: list[str] = []
    for item in container.walk_blobs(delimiter="/"):
        name = str(item.name)
        if not name.endswith("/"):
            continue  # a blob at the top level, not an account folder
        prefix = name[:-1]
        try:
            valid.append(validate_account(prefix))
        except InvalidAccount as error:
            rejected.append(prefix)
            log.warning("imports: skipping folder #%d: %s", len(rejected), error.reason)
    return sorted(valid), rejected
