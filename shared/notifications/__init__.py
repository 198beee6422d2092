"""Event notification emails: parse a queue message, send it once via SendGrid (or an outbox)."""

from __future__ import annotations

from shared.notifications.errors import EmailError, PermanentEmailError, TransientEmailError
from shared.notifications.mail import Sender, build_mail, mail_body
from shared.notifications.message import InvalidNotification, Notification, parse_notification
from shared.notifications.outbox import OutboxEmail, read_outbox, write_outbox
from shared.notifications.sender import (
    EmailSender,
    OutboxSender,
    RetryPolicy,
    SendGridSender,
    SendResult,
    sender_from_settings,
)

__all__ = [
    "EmailError",
    "EmailSender",
    "InvalidNotification",
    "Notification",
    "OutboxEmail",
    "OutboxSender",
    "PermanentEmailError",
    "RetryPolicy",
    "SendGridSender",
    "SendResult",
    "Sender",
    "TransientEmailError",
    "build_mail",
    "mail_body",
    "parse_notification",
    "read_outbox",
    "sender_from_settings",
    "write_outbox",
]
