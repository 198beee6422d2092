"""Spans and metrics of guarded invocations, leases and storage requests, through the
OpenTelemetry API: a no-op until the app configures an SDK (docs/internals.md)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from opentelemetry import metrics, trace

from blobsingleton.errors import LeaseLost, PayloadMismatch, RunLost

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
