"""The work of one unit, pluggable: app setting JOB_UNIT_HANDLER = "package.module:function".

A handler takes a `Unit` and returns nothing. It runs at least once per unit (a message can
be delivered twice, and a crash after the work but before the unit is marked repeats it), so
it should be idempotent. Raise `PermanentUnitError` for a unit that can never succeed: it is
recorded as failed at once. Any other exception makes the host retry the message; after
maxDequeueCount attempts it reaches the poison queue and the unit is recorded as failed.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shared.jobs.messages import encode_payload

log = logging.getLogger("shared.jobs.handlers")


@dataclass(frozen=True)
class Unit:
    job_id: str
    unit_id: str
    payload: Any
    attempt: int = 1  # the queue message's dequeue count


UnitHandler = Callable[[Unit], None]


def echo(unit: Unit) -> None:
    """The default handler: the payload is valid JSON (it was parsed), log its size."""
    size = len(encode_payload(unit.payload))
    log.info("job %s unit %s: payload of %d bytes", unit.job_id, unit.unit_id, size)


@functools.cache
def load_handler(spec: str) -> UnitHandler:
    """The callable named by "package.module:function"; ValueError if there is none."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"JOB_UNIT_HANDLER must look like 'package.module:function': {spec!r}")
    module = importlib.import_module(module_name)
    handler = getattr(module, attribute, None)
    if not callable(handler):
        raise ValueError(f"JOB_UNIT_HANDLER {spec!r} is not a callable")
    return handler  # type: ignore[no-any-return]
