"""What makes two notifications "the same" for one event id: the payload of its run-once record.

An event id is sent once; a message that reuses it must carry the same notification, or it is
poisoned (never silently skipped). `payload(notification)` gives the fields the recipient reads
(event id, type, recipients, subject, text, html, template and its data), recipients
lower-cased and sorted (order and case do not change who reads it). `@once(payload=...)` keeps
a hash of each field in the record, so a reused id with other content raises `PayloadMismatch`
naming the fields that differ: names only, never values (addresses and text are personal data).
"""

from __future__ import annotations

from typing import Any

from shared.notifications.message import Notification

#: The fields compared, in the order they are named.
FIELDS = ("event_id", "type", "to", "subject", "text", "html", "template_id", "template_data")


class ContentMismatch(ValueError):
    """An event id already used for a notification with other content; names the fields."""

    def __init__(self, event_id: str, fields: tuple[str, ...]) -> None:
        named = ", ".join(fields) or "unknown"
        super().__init__(
            "this event id was used before for a notification with different content "
            f"(fields that differ: {named}); not sent"
        )
        self.event_id = event_id
        self.fields = fields


def payload(notification: Notification, *_: Any) -> dict[str, Any]:
    """The `@once` payload: each compared field's value (the library stores their hashes)."""
    values: dict[str, Any] = {name: getattr(notification, name) for name in FIELDS}
    values["to"] = sorted(address.lower() for address in notification.to)
    return values


__all__ = ["FIELDS", "ContentMismatch", "payload"]
