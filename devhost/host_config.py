"""host.json as the Functions host reads it: queue options with the host's defaults.

Values can be overridden per instance with app settings named like the real host's
`AzureFunctionsJobHost__extensions__queues__maxPollingInterval`, which is also how the tests
shorten polling without editing host.json.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OVERRIDE_PREFIX = "AzureFunctionsJobHost__"
_TIMESPAN = re.compile(r"^(?:(?P<d>\d+)\.)?(?P<h>\d+):(?P<m>\d{1,2}):(?P<s>\d{1,2}(?:\.\d+)?)$")


class HostConfigError(ValueError):
    """host.json has a value the host would reject."""


def parse_timespan(value: str | int | float) -> float:
    """Seconds in a .NET TimeSpan string "[d.]hh:mm:ss[.fff]" (a number = milliseconds, v1)."""
    if isinstance(value, bool):
        raise HostConfigError(f"not a TimeSpan: {value!r}")
    if isinstance(value, int | float):
        return float(value) / 1000.0
    match = _TIMESPAN.match(value.strip())
    if not match:
        raise HostConfigError(f"not a TimeSpan (hh:mm:ss): {value!r}")
    days = int(match["d"] or 0)
    return days * 86400 + int(match["h"]) * 3600 + int(match["m"]) * 60 + float(match["s"])


@dataclass(frozen=True)
class QueueOptions:
    """extensions.queues, defaults as in the WebJobs queues extension."""

    batch_size: int = 16
    new_batch_threshold: int = 8 * (os.cpu_count() or 1)
    max_polling_interval: float = 60.0
    visibility_timeout: float = 0.0
    max_dequeue_count: int = 5
    message_encoding: str = "base64"

    @property
    def max_concurrency(self) -> int:
        """The host runs up to a batch plus the threshold at once."""
        return self.batch_size + self.new_batch_threshold


@dataclass(frozen=True)
class HostConfig:
    queues: QueueOptions = QueueOptions()
    route_prefix: str = "api"
    function_timeout: float | None = None
    log_levels: dict[str, str] = field(default_factory=dict)  # logging.logLevel, as written


def _overrides(settings: Mapping[str, str]) -> dict[str, Any]:
    """`AzureFunctionsJobHost__a__b` settings as a nested dict {"a": {"b": value}}."""
    tree: dict[str, Any] = {}
    for name, value in settings.items():
        if not name.startswith(OVERRIDE_PREFIX):
            continue
        path = name[len(OVERRIDE_PREFIX) :].split("__")
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return tree


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    result = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = _merge(result[key], value)
        else:
            result[key] = value
    return result


def _lower_keys(section: Any) -> dict[str, Any]:
    """Keys lower-cased at every level: .NET configuration keys are case-insensitive."""
    if not isinstance(section, dict):
        return {}
    return {
        str(k).lower(): _lower_keys(v) if isinstance(v, dict) else v for k, v in section.items()
    }


def _int(section: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    raw = section.get(key.lower(), default)
    try:
        value = int(raw)
    except (TypeError, ValueError) as error:
        raise HostConfigError(f"extensions.queues.{key} must be an integer: {raw!r}") from error
    if not low <= value <= high:
        raise HostConfigError(f"extensions.queues.{key} must be in [{low}, {high}]: {value}")
    return value


def queue_options(section: Any, cores: int | None = None) -> QueueOptions:
    """Parse `extensions.queues`; keys are case-insensitive like .NET configuration."""
    cfg = _lower_keys(section)
    batch = _int(cfg, "batchSize", 16, 1, 32)
    cores = cores or os.cpu_count() or 1
    threshold = _int(cfg, "newBatchThreshold", -1, -1, 10_000)
    if threshold < 0:
        threshold = batch // 2 * cores
    encoding = str(cfg.get("messageencoding", "base64")).lower()
    if encoding not in ("base64", "none"):
        raise HostConfigError(f"extensions.queues.messageEncoding: base64 or none, not {encoding}")
    return QueueOptions(
        batch_size=batch,
        new_batch_threshold=threshold,
        max_polling_interval=parse_timespan(cfg.get("maxpollinginterval", "00:01:00")),
        visibility_timeout=parse_timespan(cfg.get("visibilitytimeout", "00:00:00")),
        max_dequeue_count=_int(cfg, "maxDequeueCount", 5, 1, 1_000_000),
        message_encoding=encoding,
    )


def load_host_config(
    app_dir: Path | str = ".", settings: Mapping[str, str] | None = None
) -> HostConfig:
    """host.json of the app (absent = all defaults) with app-setting overrides applied."""
    path = Path(app_dir) / "host.json"
    data: dict[str, Any] = {}
    if path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8-sig"))
        except json.JSONDecodeError as error:
            raise HostConfigError(f"{path}: {error}") from error
    overrides = _overrides(os.environ if settings is None else settings)
    data = _merge(_lower_keys(data), _lower_keys(overrides))
    extensions = _lower_keys(data.get("extensions"))
    http = _lower_keys(extensions.get("http"))
    timeout = data.get("functiontimeout")
    logging_section = data.get("logging")
    log_levels = logging_section.get("loglevel") if isinstance(logging_section, dict) else None
    return HostConfig(
        log_levels={str(k): str(v) for k, v in (log_levels or {}).items()},
        queues=queue_options(extensions.get("queues") or {}),
        route_prefix=str(http.get("routeprefix", "api")).strip("/"),
        function_timeout=parse_timespan(timeout) if timeout else None,
    )
