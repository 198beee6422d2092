"""Turn a `Notification` into SendGrid's v3 mail body, with the official `sendgrid` helpers.

One personalization per recipient, so each recipient gets their own email and never sees the
other addresses. `custom_args.event_id` is set on each personalization (SendGrid copies it onto
every delivery and webhook event); the message-level `custom_args` is not used because the
published OpenAPI spec types it as a string, while the personalization-level one is an object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sendgrid.helpers.mail import (
    Content,
    CustomArg,
    From,
    Mail,
    MimeType,
    Personalization,
    To,
)

from shared.notifications.message import Notification


@dataclass(frozen=True)
class Sender:
    """The From of every notification email (app settings EMAIL_FROM, EMAIL_FROM_NAME)."""

    email: str
    name: str | None = None


def _address(cls: type[Any], email: str, name: str | None = None) -> Any:
    # Set the fields directly: the helpers' constructor would re-parse "Name <addr>" strings.
    address = cls()
    address.email = email
    if name:
        address.name = name
    return address


def build_mail(notification: Notification, sender: Sender) -> Mail:
    """The `Mail` for one notification; `build_mail(...).get()` is the JSON request body."""
    mail = Mail()
    mail.from_email = _address(From, sender.email, sender.name)
    mail.subject = notification.subject
    if notification.text is not None:
        mail.add_content(Content(MimeType.text, notification.text))
    if notification.html is not None:
        mail.add_content(Content(MimeType.html, notification.html))
    if notification.template_id is not None:
        mail.template_id = notification.template_id
    for index, recipient in enumerate(notification.to):
        personalization = Personalization()
        personalization.add_to(_address(To, recipient))
        personalization.add_custom_arg(CustomArg("event_id", notification.event_id))
        if notification.template_data:
            personalization.dynamic_template_data = dict(notification.template_data)
        mail.add_personalization(personalization, index=index)
    return mail


def mail_body(notification: Notification, sender: Sender) -> dict[str, Any]:
    """The exact JSON body `POST /v3/mail/send` receives for `notification`."""
    body: dict[str, Any] = build_mail(notification, sender).get()
    return body
