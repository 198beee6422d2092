"""What the host's queue trigger metadata becomes when a message's JSON body names it.

The host merges a JSON body's top-level fields into the trigger metadata (any case), so a body
field named like one of `HOST_QUEUE_METADATA` replaces the queue's own value in
`func.QueueMessage` (`msg.id`, `msg.dequeue_count`...): `overridden_metadata` tells which, and
`describe_id` names a message in a log line without trusting such an id.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import azure.functions as func

#: The host's queue trigger metadata. It merges a JSON body's top-level fields into it (any
#: case), so a body field named like one replaces `msg.id`, `msg.dequeue_count`...
HOST_QUEUE_METADATA = (
    "Id",
    "DequeueCount",
    "InsertionTime",
    "ExpirationTime",
    "NextVisibleTime",
    "PopReceipt",
    "QueueTrigger",
)


def overridden_metadata(body: bytes) -> list[str]:
    """The host metadata names a JSON-object body overrides (case-insensitive), if any."""
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):  # not JSON, or nested too deep
        return []
    if not isinstance(parsed, dict):
        return []
    return overridden_fields(parsed)


def overridden_fields(names: Iterable[object]) -> list[str]:
    """The host metadata names among a decoded body's field `names` (case-insensitive)."""
    fields = {str(name).lower() for name in names}
    return [name for name in HOST_QUEUE_METADATA if name.lower() in fields]


def describe_id(message: func.QueueMessage) -> str:
    """`message.id` for a log line, flagged when the body set it (the queue's id is then lost)."""
    if "Id" in overridden_metadata(message.get_body()):
        return f"{message.id!r} (an id its body set; the queue's own id is not available)"
    return str(message.id)
