"""App setting values parsed the same way everywhere (the reading itself is
`blobsingleton.settings.setting`, with the setting's name as a literal at the call)."""

from __future__ import annotations

import math

from blobsingleton.settings import setting


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
