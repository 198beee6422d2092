"""What operators see of leases and runs: one structured log record per event on the
`blobsingleton.events` logger (public: `blobsingleton.events`)."""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime
from typing import Any

from blobsingleton._invocation import current_invocation_id
from blobsingleton._owner import instance_id

log = logging.getLogger("blobsingleton.events")

#: The library's own event kinds. An app adds its own (`events.emit("stale_writer", ...)`).
KINDS = frozenset(
    {"acquire", "busy_skip", "defer", "renewal_failed", "lost", "takeover", "break", "reset",
     "completed", "replay"}
)  # fmt: skip
_WARNINGS = frozenset({"renewal_failed", "lost", "break", "reset"})
_KIND = re.compile(r"[a-z][a-z0-9_]{0,39}")


def emit(kind: str, *, warning: bool | None = None, **dims: Any) -> None:
    """Log event `kind` (one of `KINDS`, or an app's own: lower-case letters, digits, '_') with
    `dims` (key, instance, function, invocation_id, token, duration_s...); `invocation_id`
    defaults to the worker's id of the current invocation. `warning`: log at WARNING rather
    than INFO (default: as the library logs its kinds; INFO for others)."""
    if not _KIND.fullmatch(kind):
        raise ValueError(f"an event kind is lower-case letters, digits and '_', not {kind!r}")
    loud = kind in _WARNINGS if warning is None else warning
    if not log.isEnabledFor(logging.WARNING if loud else logging.INFO):
        return  # nobody listens at that level: nothing to build
    if dims.get("invocation_id") is None:  # the worker's id for the invocation, if any
        dims["invocation_id"] = current_invocation_id()
    values = {"instance": instance_id(), **{n: v for n, v in dims.items() if v is not None}}
    if isinstance(values.get("duration_s"), float):
        values["duration_s"] = round(values["duration_s"], 3)
    dimensions = {"event": kind, **values}
    text = " ".join(f"{name}={_quoted(value)}" for name, value in dimensions.items())
    log.log(
        logging.WARNING if loud else logging.INFO,
        "%s",
        text,
        extra={**dimensions, "custom_dimensions": dimensions},
    )


def _quoted(value: Any) -> str:
    text = str(value)
    return json.dumps(text) if not text or any(c in text for c in ' "=\\') else text


def emit_lease(kind: str, lease: Any, **dims: Any) -> None:
    """`emit` with what a lease knows: key, token, owner (function, invocation), held for."""
    owner = getattr(lease, "owner", None)
    acquired = getattr(owner, "acquired_at", None)
    known = {
        "key": lease.key,
        "token": getattr(lease, "_token", None) or getattr(owner, "token", None),
        "instance": getattr(owner, "instance", None),
        "function": getattr(owner, "function", None) or None,
        "invocation_id": getattr(owner, "invocation_id", None) or None,
        "duration_s": (datetime.now(UTC) - acquired).total_seconds() if acquired else None,
    }
    emit(kind, **{**known, **dims})
