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
from typing import Annotated, Any, Self

from blobsingleton.config import validate_key
from blobsingleton.errors import InvalidKey
from pydantic import AfterValidator, BeforeValidator, Field, field_validator, model_validator

from shared.json_body import json_type
from shared.models import MessageModel, Problem, fail_at, rule
from shared.notifications.addresses import is_valid_address

#: Azure Queue Storage's message size limit; a body larger than this can never have been queued.
MAX_BODY_BYTES = 64 * 1024
MAX_EVENT_ID_LENGTH = 128
MAX_TYPE_LENGTH = 128
MAX_RECIPIENTS = 50
MAX_SUBJECT_LENGTH = 998  # RFC 5322 line length limit
MAX_TEMPLATE_ID_LENGTH = 128

_SENDER_FIELDS = frozenset({"from", "from_email", "from_name", "sender", "reply_to"})
_TEMPLATE_ID = re.compile(r"[A-Za-z0-9_-]+")


class InvalidNotification(ValueError):
    """A message body that is not a valid notification; `field` says where, `reason` why
    (the first problem; `problems` has them all)."""

    def __init__(self, field: str, reason: str, problems: list[Problem] | None = None) -> None:
        super().__init__(f"invalid notification: {field}: {reason}")
        self.field = field
        self.reason = reason
        self.problems = problems if problems is not None else [Problem(field, reason)]


def _has_control(value: str, *, allow_newlines: bool = False) -> bool:
    allowed = "\r\n\t" if allow_newlines else ""
    return any((not ch.isprintable()) and ch not in allowed for ch in value)


def _line(value: str) -> str:
    """Text of one line: not blank, no line break or other control character."""
    if not value.strip():
        raise rule("must not be empty")
    if _has_control(value):
        raise rule("contains line breaks or other control characters")
    return value


def _event_id(value: str) -> str:
    try:
        return validate_key(value, max_length=MAX_EVENT_ID_LENGTH)
    except InvalidKey as error:
        raise rule(error.reason) from None


def _address(value: str) -> str:
    if not is_valid_address(value):
        raise rule("is not a valid email address (syntax check)")
    return value


def _recipient_list(value: object) -> object:
    """One address or an array of them, as a tuple (an array's items validated one by one)."""
    if isinstance(value, str):
        return (_address(value),)
    if not isinstance(value, list | tuple):
        raise rule(f"must be an address or an array of them, not {json_type(value)}")
    if not value:
        raise rule("must name at least one recipient")
    if len(value) > MAX_RECIPIENTS:
        raise rule(f"has {len(value)} recipients, the limit is {MAX_RECIPIENTS}")
    return tuple(value)


def _distinct(addresses: tuple[str, ...]) -> tuple[str, ...]:
    """One email per distinct recipient: the same address twice would mail them twice."""
    seen: set[str] = set()
    unique: list[str] = []
    for address in addresses:
        if address.lower() not in seen:
            seen.add(address.lower())
            unique.append(address)
    return tuple(unique)


def _content(value: str) -> str:
    if not value.strip():
        raise rule("must be a non-empty string when given")
    return value


def _template_id(value: str) -> str:
    if not _TEMPLATE_ID.fullmatch(value):
        raise rule("may hold only letters, digits, '-' and '_'")
    return value


def _json_copy(value: dict[str, Any]) -> dict[str, Any]:
    """A private, JSON-only copy: the caller's dict can't change a frozen notification."""
    try:
        copy: dict[str, Any] = json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        raise rule("must hold only JSON values") from None
    return copy


Line = Annotated[str, AfterValidator(_line)]
Content = Annotated[str, AfterValidator(_content)]


class Notification(MessageModel):
    """A validated notification (see the module's doc for its body); constructing one
    validates it, whichever way it is built."""

    error = InvalidNotification
    max_bytes = MAX_BODY_BYTES

    event_id: Annotated[str, AfterValidator(_event_id)]
    type: Annotated[Line, Field(max_length=MAX_TYPE_LENGTH)]
    to: Annotated[
        tuple[Annotated[str, AfterValidator(_address)], ...],
        BeforeValidator(_recipient_list),
        AfterValidator(_distinct),
    ]
    subject: Annotated[Line, Field(max_length=MAX_SUBJECT_LENGTH)]
    text: Content | None = None
    html: Content | None = None
    template_id: (
        Annotated[Line, Field(max_length=MAX_TEMPLATE_ID_LENGTH), AfterValidator(_template_id)]
        | None
    ) = None
    template_data: Annotated[dict[str, Any], AfterValidator(_json_copy)] | None = None

    @field_validator("text", "html", "template_id", "template_data", mode="before")
    @classmethod
    def _not_null(cls, value: object) -> object:
        if value is None:
            raise rule("must not be null (leave it out instead)")
        return value

    @model_validator(mode="after")
    def _one_kind_of_body(self) -> Self:
        has_content = self.text is not None or self.html is not None
        if self.template_id is None:
            if self.template_data is not None:
                fail_at(("template_data",), "needs template_id")
            if not has_content:
                raise rule("needs text, html, or template_id")
        elif has_content:
            fail_at(("template_id",), "cannot be combined with text or html")
        size = len(self.to_json().encode("utf-8"))
        if size > MAX_BODY_BYTES:
            raise rule(f"is {size} bytes, the limit is {MAX_BODY_BYTES}")
        return self

    @classmethod
    def invalid(cls, problems: list[Problem]) -> Exception:
        """The first problem names the error, an unknown or sender field's first: the sender
        is never part of a message (EMAIL_FROM), and a typo ("htm") fails loudly."""
        problems = sorted(problems, key=lambda p: p.message != "is not a known field")
        problems = [_sender(p) for p in problems]
        first = problems[0]
        return InvalidNotification(first.field or "body", first.message, problems)

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

    __str__ = __repr__  # pydantic's str() would list every field

    def __hash__(self) -> int:
        # template_data (a dict) is left out, as it was of the dataclass's hash.
        return hash((self.event_id, self.type, self.to, self.subject, self.text, self.html,
                     self.template_id))  # fmt: skip


def _sender(problem: Problem) -> Problem:
    name = problem.field.strip("'")
    if problem.message == "is not a known field" and name in _SENDER_FIELDS:
        return Problem(name, "is not allowed: the sender comes from EMAIL_FROM")
    return problem


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
