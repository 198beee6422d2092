"""App setting values parsed the same way everywhere (the reading itself is
`blobsingleton.settings.setting`, with the setting's name as a literal at the call)."""

from __future__ import annotations


def parse_flag(raw: str | None, name: str) -> bool:
    """A true/false setting: `true`/`1` or `false`/`0` (any case), unset or empty is false;
    anything else is a `ValueError` naming the setting, so a typo fails loudly."""
    value = (raw or "false").strip().lower()
    if value not in ("true", "false", "1", "0"):
        raise ValueError(f"app setting {name} must be true or false, not {raw!r}")
    return value in ("true", "1")
