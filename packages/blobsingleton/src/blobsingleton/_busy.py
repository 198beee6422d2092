"""What a decorated function does when its key is busy (held, or in progress elsewhere)."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any


class Busy(StrEnum):
    """Policies shared by `@singleton` and `@once`."""

    SKIP = "skip"  # log and return None: this delivery is complete
    WAIT = "wait"  # wait up to a timeout, then fail so the host retries
    DEFER = "defer"  # re-enqueue a copy of the queue message with a delay; complete this one


#: A policy, or a callable given the busy error that returns the function's result
#: (e.g. an HTTP 409 response).
BusyPolicy = Busy | Callable[[Exception], Any]


def check_policy(policy: BusyPolicy, queue: str | None) -> None:
    """Reject a policy that cannot work, at decoration time rather than at 2 a.m."""
    if policy == Busy.DEFER and not queue:
        raise ValueError("on_busy=Busy.DEFER needs queue='%QUEUE_SETTING%' (where to re-enqueue)")
    if not isinstance(policy, Busy) and not callable(policy):
        raise TypeError(f"on_busy must be a Busy policy or a callable, not {policy!r}")
