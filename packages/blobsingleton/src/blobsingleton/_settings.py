"""App settings, read the way the Functions host exposes them: as environment variables."""

from __future__ import annotations

import os
import re

from blobsingleton.errors import SettingMissing

_PLACEHOLDER = re.compile(r"%([A-Za-z_][A-Za-z0-9_:.\-]*)%")


def setting(name: str, default: str | None = None) -> str | None:
    """The value of app setting `name`, or `default` when it is unset or empty."""
    value = os.environ.get(name)
    return value if value else default


def require(name: str) -> str:
    """The value of app setting `name`; `SettingMissing` when it is unset."""
    value = setting(name)
    if value is None:
        raise SettingMissing(name)
    return value


def resolve_placeholders(template: str) -> str:
    """Replace each `%NAME%` by app setting NAME, as the host does in binding expressions."""
    return _PLACEHOLDER.sub(lambda m: require(m.group(1)), template)
