"""App settings, read the way the Functions host exposes them (environment variables), and
their values parsed the same way everywhere. Each call names its setting as a literal (so
tests/ops/test_settings.py finds every setting the app reads)."""

from __future__ import annotations

import math
import os
import re

from blobsingleton.errors import SettingMissing

_PLACEHOLDER = re.compile(r"%([A-Za-z_][A-Za-z0-9_:.\-]*)%")


def setting(name: str, default: str | None = None) -> str | None:
    """The value of app setting `name`, or `default` when it is unset or empty."""
    value = os.environ.get(name)
    return value if value else default


def require(name: str) -> str:
    """The value of app setting `name`; `SettingMissing` (naming it) when it is unset or empty."""
    value = setting(name)
    if value is None:
        raise SettingMissing(name)
    return value


def resolve_placeholders(template: str) -> str:
    """Replace each `%NAME%` by app setting NAME, as the host does in binding expressions
    (`SettingMissing` naming the first one unset)."""
    return _PLACEHOLDER.sub(lambda m: require(m.group(1)), template)


class InvalidSetting(ValueError):
    """An app setting whose value the app cannot use; the message names the setting."""


def parse_flag(raw: str | None, name: str) -> bool:
    """A true/false setting: `true`/`1` or `false`/`0` (any case), unset or empty is false;
    anything else is a `ValueError` naming the setting, so a typo fails loudly."""
    value = (raw or "false").strip().lower()
    if value not in ("true", "false", "1", "0"):
        raise ValueError(f"app setting {name} must be true or false, not {raw!r}")
    return value in ("true", "1")


def number_setting(name: str, default: float, low: float, high: float | None = None) -> float:
    """App setting `name` as a finite number from `low` to `high` (no upper bound: None);
    unset or empty is `default`; anything else is `InvalidSetting` naming the setting."""
    raw = setting(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InvalidSetting(f"app setting {name} must be a number, not {raw!r}") from None
    if not math.isfinite(value):
        raise InvalidSetting(f"app setting {name} must be a finite number, not {raw!r}")
    if value < low or (high is not None and value > high):
        bounds = f"{low:g} to {high:g}" if high is not None else f"at least {low:g}"
        raise InvalidSetting(f"app setting {name} must be {bounds}, not {raw!r}")
    return value


def whole_setting(name: str, default: int, low: int, high: int | None = None) -> int:
    """`number_setting` for a count: a fraction is `InvalidSetting` too, never rounded."""
    value = number_setting(name, default, low, high)
    if value != int(value):
        raise InvalidSetting(f"app setting {name} must be a whole number, not {value:g}")
    return int(value)
