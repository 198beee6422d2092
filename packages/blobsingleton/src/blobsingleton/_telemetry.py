"""What operators see: one structured log record per lease and run-once event, and spans and
metrics through the OpenTelemetry API, a no-op until the app configures an SDK
(docs/internals.md)."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from opentelemetry import metrics, trace

from blobsingleton._invocation import current_invocation_id
from blobsingleton._owner import instance_id
from blobsingleton.errors import LeaseLost, PayloadMismatch, RunLost

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
    if dims.get("invocation_id") is None:  # the worker's id for the invocation, if any
        dims["invocation_id"] = current_invocation_id()
    values = {"instance": instance_id(), **{n: v for n, v in dims.items() if v is not None}}
    if isinstance(values.get("duration_s"), float):
        values["duration_s"] = round(values["duration_s"], 3)
    dimensions = {"event": kind, **values}
    text = " ".join(f"{name}={_quoted(value)}" for name, value in dimensions.items())
    loud = kind in _WARNINGS if warning is None else warning
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


_tracer = trace.get_tracer("blobsingleton")
_meter = metrics.get_meter("blobsingleton")
#: Seconds a call waited for its key (a lease, or a run-once record in progress elsewhere).
WAITED = _meter.create_histogram("blobsingleton.wait", unit="s")
#: Seconds a key was held: a lease from acquire to release, a run-once claim to its settling.
HELD = _meter.create_histogram("blobsingleton.hold", unit="s")
#: Guarded invocations, by decorator and outcome.
INVOCATIONS = _meter.create_counter("blobsingleton.invocations")
LEASES_LOST = _meter.create_counter("blobsingleton.leases.lost")
TAKEOVERS = _meter.create_counter("blobsingleton.takeovers")
#: Storage operations by kind (as the library names them; the SDK's retries not counted).
STORAGE = _meter.create_counter("blobsingleton.storage.operations")


def annotate(**attributes: Any) -> None:
    """Set `blobsingleton.*` attributes on the current span (None values left out)."""
    span = trace.get_current_span()
    for name, value in attributes.items():
        if value is not None:
            span.set_attribute(f"blobsingleton.{name}", value)


def storage(operation: str) -> None:
    STORAGE.add(1, {"operation": operation})


@contextlib.contextmanager
def span(name: str, **attributes: Any) -> Iterator[float]:
    """A span named `name`, child of the current one; yields its monotonic start."""
    with _tracer.start_as_current_span(name):
        annotate(**attributes)
        yield time.monotonic()


class Invocation:
    """What a guarded invocation's span and metrics say: set `outcome`, call `waited()`."""

    def __init__(self, decorator: str) -> None:
        self.decorator, self.outcome = decorator, "ran"
        self.started = self.admitted = time.monotonic()

    def waited(self, **attributes: Any) -> None:
        """The guard admitted the call (or said why not): its wait, key, token, attempt."""
        self.admitted = time.monotonic()
        wait = self.admitted - self.started
        WAITED.record(wait, {"decorator": self.decorator})
        annotate(wait_s=round(wait, 6), **attributes)

    def finished(self, error: BaseException | None) -> None:
        if isinstance(error, RunLost | LeaseLost):
            self.outcome = "lost"
        elif error is not None and self.outcome == "ran":
            self.outcome = "mismatch" if isinstance(error, PayloadMismatch) else "failed"
        if self.outcome in ("ran", "lost"):
            HELD.record(time.monotonic() - self.admitted, {"decorator": self.decorator})
        INVOCATIONS.add(1, {"decorator": self.decorator, "outcome": self.outcome})
        annotate(outcome=self.outcome)


@contextlib.contextmanager
def invocation(decorator: str, template: str) -> Iterator[Invocation]:
    """The span of one guarded invocation, `"{decorator} {template}"`."""
    call = Invocation(decorator)
    with span(f"{decorator} {template}"):
        try:
            yield call
        except BaseException as error:
            call.finished(error)
            raise
        call.finished(None)
