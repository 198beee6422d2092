"""The app's own logging settings, applied at import so they hold under the Python worker.

The worker sets the root logger to INFO and ships every record to the host, so azure-core's
HTTP logging policy (one record per storage request and one per response, 2 to 10 per
invocation) would reach Application Insights, billed per GB. Its category is set to Warning
unless host.json `logging.logLevel` names it (keys are case-insensitive), e.g.
`"azure.core.pipeline.policies.http_logging_policy": "Information"` to see every request.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

HTTP_LOGGING_CATEGORY = "azure.core.pipeline.policies.http_logging_policy"
APP_ROOT = Path(__file__).resolve().parent.parent

#: .NET LogLevel names (host.json) as Python levels; None lets nothing through.
LEVELS = {
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "information": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "none": logging.CRITICAL + 10,
}


def python_level(name: str) -> int:
    """A host.json (.NET LogLevel) level name as a Python level; ValueError for unknown ones."""
    try:
        return LEVELS[str(name).strip().lower()]
    except KeyError:
        raise ValueError(f"not a log level: {name!r} (one of {', '.join(LEVELS)})") from None


def configured_level(category: str, app_root: Path = APP_ROOT, default: str = "Warning") -> int:
    """The host.json `logging.logLevel` entry for `category` as a Python level, else `default`."""
    try:
        config = json.loads((app_root / "host.json").read_text(encoding="utf-8-sig"))
    except (OSError, ValueError):
        config = {}
    levels = (config.get("logging") or {}).get("logLevel") or {}
    by_name = {str(key).lower(): str(value) for key, value in levels.items()}
    return python_level(by_name.get(category.lower(), default))


def quiet_storage_http_logging(app_root: Path = APP_ROOT) -> None:
    """azure-core's per-request records at Warning unless host.json raises them."""
    logging.getLogger(HTTP_LOGGING_CATEGORY).setLevel(
        configured_level(HTTP_LOGGING_CATEGORY, app_root)
    )
