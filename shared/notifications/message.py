"""The event notification a queue message carries, parsed and validated before anything is sent.

Message body (UTF-8 JSON object, at most 64 KiB):

    {"event_id": "order-42-shipped", "type": "order.shipped",
     "to": "ada@example.com" | ["ada@example.com", ...],      # 1..50 addresses
     "subject": "Your order has shipped",                        # 1..998 characters
     "text": "...", "html": "..."                                # one or both, or:
     "template_id": "d-...", "template_data": {...}}             # a dynamic template

The sender is never part of the message (it comes from the app setting EMAIL_FROM), and unknown
fields are rejected, so a typo ("htm") fails loudly instead of sending an empty email.
Errors name the field and the rule, never an address or body text (both are personal data and
error messages end up in logs).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from blobsingleton.config import validate_key
from blobsingleton.errors import InvalidKey

from shared.json_body import InvalidBody, json_type, parse_object
from shared.notifications.addresses import is_valid_address, scrub_addresses

#: Azure Queue Storage's message size limit; a body larger than this can never have been queued.
MAX_BODY_BYTES = 64 * 1024
MAX_EVENT_ID_LENGTH = 128
MAX_TYPE_LENGTH = 128
MAX_RECIPIENTS = 50
MAX_SUBJECT_LENGTH = 998  # RFC 5322 line length limit
MAX_TEMPLATE_ID_LENGTH = 128

_FIELDS = ("event_id", "type", "to", "subject", "text", "html", "template_id", "template_data")
_REQUIRED = ("event_id", "type", "to", "subject")
_SENDER_FIELDS = frozenset({"from", "from_email", "from_name", "sender", "reply_to"})
_TEMPLATE_ID = re.compile(r"[A-Za-z0-9_-]+")


class InvalidNotification(ValueError):
    """A message body that is not a valid notification; `field` says where, `reason` why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"invalid notification: {field}: {reason}")
        self.field = field
        self.reason = reason


def _has_control(value: str, *, allow_newlines: bool = False) -> bool:
    allowed = "\r\n\t" if allow_newlines else ""
    return any((not ch.isprintable()) and ch not in allowed for ch in value)


def _string(name: str, value: object, *, max_length: int) -> str:
    if not isinstance(value, str):
        raise InvalidNotification(name, f"must be a string, not {json_type(value)}")
    if not value.strip():
        raise InvalidNotification(name, "must not be empty")
    if len(value) > max_length:
        limit = f"is {len(value)} characters long, the limit is {max_length}"
        raise InvalidNotification(name, limit)
    if _has_control(value):
        raise InvalidNotification(name, "contains line breaks or other control characters")
    return value


def _recipients(value: object) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        kind = json_type(value)
        raise InvalidNotification("to", f"must be an address or an array of them, not {kind}")
    if not items:
        raise InvalidNotification("to", "must name at least one recipient")
    if len(items) > MAX_RECIPIENTS:
        limit = f"has {len(items)} recipients, the limit is {MAX_RECIPIENTS}"
        raise InvalidNotification("to", limit)
    seen: set[str] = set()
    unique: list[str] = []
    for index, item in enumerate(items):
        where = "to" if isinstance(value, str) else f"to[{index}]"
        if not isinstance(item, str):
            raise InvalidNotification(where, f"must be a string, not {json_type(item)}")
        if not is_valid_address(item):
            raise InvalidNotification(where, "is not a valid email address (syntax check)")
        # One email per distinct recipient: the same address twice would mail them twice.
        if item.lower() not in seen:
            seen.add(item.lower())
            unique.append(item)
    return tuple(unique)


@dataclass(frozen=True, repr=False)
class Notification:
    """A validated notification; constructing one validates it, whichever way it is built."""

    event_id: str
    type: str
    to: tuple[str, ...]
    subject: str
    text: str | None = None
    html: str | None = None
    template_id: str | None = None
    template_data: dict[str, Any] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        try:
            validate_key(self.event_id, max_length=MAX_EVENT_ID_LENGTH)
        except InvalidKey as exc:
            raise InvalidNotification("event_id", exc.reason) from None
        _string("type", self.type, max_length=MAX_TYPE_LENGTH)
        object.__setattr__(self, "to", _recipients(self.to))
        _string("subject", self.subject, max_length=MAX_SUBJECT_LENGTH)
        self._check_body()
        if self.template_data is not None:
            # A private, JSON-only copy: the caller's dict can't change a frozen notification.
            try:
                copy = json.loads(json.dumps(self.template_data, allow_nan=False))
            except (TypeError, ValueError):
                raise InvalidNotification("template_data", "must hold only JSON values") from None
            object.__setattr__(self, "template_data", copy)
        size = len(self.to_json().encode("utf-8"))
        if size > MAX_BODY_BYTES:
            raise InvalidNotification("body", f"is {size} bytes, the limit is {MAX_BODY_BYTES}")

    def _check_body(self) -> None:
        for name in ("text", "html"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise InvalidNotification(name, "must be a non-empty string when given")
        has_content = self.text is not None or self.html is not None
        if self.template_id is None:
            if self.template_data is not None:
                raise InvalidNotification("template_data", "needs template_id")
            if not has_content:
                raise InvalidNotification("body", "needs text, html, or template_id")
            return
        if has_content:
            raise InvalidNotification("template_id", "cannot be combined with text or html")
        template_id = _string("template_id", self.template_id, max_length=MAX_TEMPLATE_ID_LENGTH)
        if not _TEMPLATE_ID.fullmatch(template_id):
            raise InvalidNotification("template_id", "may hold only letters, digits, '-' and '_'")
        if self.template_data is not None and not isinstance(self.template_data, dict):
            raise InvalidNotification(
                "template_data", f"must be an object, not {json_type(self.template_data)}"
            )

    # -- parsing ---------------------------------------------------------------------------

    @classmethod
    def parse(cls, body: bytes | str) -> Notification:
        """Parse a queue message body; `InvalidNotification` says what is wrong with it."""
        try:
            data = parse_object(body, max_bytes=MAX_BODY_BYTES)
        except InvalidBody as error:
            where = "body" if error.field is None else _field_name(error.field)
            raise InvalidNotification(where, error.reason) from None
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: object) -> Notification:
        """Build from the decoded JSON object of a message body."""
        if not isinstance(data, Mapping):
            raise InvalidNotification("body", f"must be a JSON object, not {json_type(data)}")
        for name in data:
            if name in _SENDER_FIELDS:
                raise InvalidNotification(name, "is not allowed: the sender comes from EMAIL_FROM")
            if name not in _FIELDS:
                raise InvalidNotification(_field_name(name), "is not a known field")
        for name in _REQUIRED:
            if name not in data:
                raise InvalidNotification(name, "is missing")
        values = {name: data[name] for name in _FIELDS if name in data}
        for name in ("text", "html", "template_id", "template_data"):
            if name in values and values[name] is None:
                raise InvalidNotification(name, "must not be null (leave it out instead)")
        return cls(**values)

    # -- output ----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The JSON object this notification is carried as (optional fields left out if unset)."""
        data: dict[str, Any] = {
            "event_id": self.event_id,
            "type": self.type,
            "to": list(self.to),
            "subject": self.subject,
        }
        for name in ("text", "html", "template_id", "template_data"):
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        return data

    def to_json(self) -> str:
        """A compact queue message body for this notification (what producers enqueue)."""
        return json.dumps(
            self.to_dict(), ensure_ascii=False, separators=(",", ":"), allow_nan=False
        )

    def __repr__(self) -> str:
        # Addresses and body text are personal data: keep them out of reprs (and so out of logs).
        kind = "template" if self.template_id else "content"
        return (
            f"Notification(event_id={self.event_id!r}, type={self.type!r}, "
            f"recipients={len(self.to)}, body={kind})"
        )


def _field_name(name: object) -> str:
    """A field name fit for an error message: short, and with any address scrubbed out."""
    return scrub_addresses(repr(str(name)[:64]))


def parse_notification(body: bytes | str) -> Notification:
    """Same as `Notification.parse`."""
    return Notification.parse(body)


__all__ = [
    "MAX_BODY_BYTES",
    "MAX_RECIPIENTS",
    "InvalidNotification",
    "Notification",
    "parse_notification",
]
