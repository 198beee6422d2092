"""Send a notification email: through SendGrid, or into a blob "outbox" when no API key is set.

`sender_from_settings()` picks one from app settings:

- SENDGRID_API_KEY set (in Azure usually a Key Vault reference the platform resolves):
  `SendGridSender`, from EMAIL_FROM (required) and EMAIL_FROM_NAME, to SENDGRID_HOST or the
  global API (`https://api.eu.sendgrid.com` for EU-pinned subusers);
- otherwise `OutboxSender`: the mail body as JSON blobs in EMAIL_OUTBOX_CONTAINER ("outbox"),
  so local runs and tests can count the emails that would have been sent.

SendGridSender retries what can succeed later (429, 408, 5xx, connection errors, timeouts) with
exponential backoff and jitter, honouring Retry-After (or X-RateLimit-Reset) on 429 up to a cap,
and raises `TransientEmailError` when the attempts run out; any other 4xx raises
`PermanentEmailError` at once. Neither message carries the API key or an address.

Retry settings (all optional): EMAIL_MAX_ATTEMPTS (4), EMAIL_BACKOFF_BASE_SECONDS (1),
EMAIL_BACKOFF_MAX_SECONDS (30), EMAIL_RETRY_AFTER_CAP_SECONDS (60), SENDGRID_TIMEOUT_SECONDS (10).
With the defaults one send takes at most about 4 x 10 s + 3 x 60 s, inside the host's function
timeout; the event's run-once record stays alive meanwhile by its heartbeat, so only a send
that crashed holds the event id, for one in-progress timeout (15 s by default).
"""

from __future__ import annotations

import email.utils
import functools
import http.client
import json
import logging
import random
import time
import urllib.error
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import python_http_client
import sendgrid

from shared import settings
from shared.notifications.addresses import is_valid_address, scrub_addresses
from shared.notifications.errors import PermanentEmailError, TransientEmailError
from shared.notifications.mail import Sender, mail_body
from shared.notifications.message import Notification
from shared.notifications.outbox import outbox_container, write_outbox
from shared.settings import number_setting, whole_setting

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient

logger = logging.getLogger(__name__)

DEFAULT_HOST = "https://api.sendgrid.com"
#: Used by the outbox when EMAIL_FROM is unset: outbox mail is never delivered.
OUTBOX_DEFAULT_FROM = "notifications@example.com"
_RETRYABLE_STATUS = frozenset({408, 429})
_MAX_ERROR_TEXT = 500


# -- keep the API key and addresses out of logs ------------------------------------------------


class _DropRequestDetails(logging.Filter):
    """Drops python-http-client's debug records of request headers (API key) and bodies."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = str(record.msg)
        if text.startswith(("HEADERS:", "PAYLOAD:")):
            return False
        return "Authorization" not in text and "Bearer " not in text


def _install_log_filter() -> None:
    # python_http_client.client logs every request's headers (with "Authorization: Bearer <key>")
    # and body (with addresses) at DEBUG. A filter on its logger stops them for every handler.
    client_logger = logging.getLogger("python_http_client.client")
    if not any(isinstance(f, _DropRequestDetails) for f in client_logger.filters):
        client_logger.addFilter(_DropRequestDetails())


_install_log_filter()


# -- results and the sender interface --------------------------------------------------------


@dataclass(frozen=True)
class SendResult:
    """What a send did: which provider took the email, its id there, how many attempts it took."""

    provider: str
    message_id: str | None
    attempts: int = 1
    status: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """A small JSON-able summary (the run-once record stores it)."""
        return {
            "provider": self.provider,
            "message_id": self.message_id,
            "attempts": self.attempts,
            "status": self.status,
        }


@runtime_checkable
class EmailSender(Protocol):
    """Something that sends one notification email, or raises an `EmailError` saying why not."""

    provider: str

    def send(self, notification: Notification) -> SendResult: ...


# -- SendGrid --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """How SendGridSender retries: attempts in all, and the exponential backoff between them."""

    max_attempts: int = 4
    base_delay: float = 1.0
    max_delay: float = 30.0
    retry_after_cap: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if min(self.base_delay, self.max_delay, self.retry_after_cap) < 0:
            raise ValueError("delays must not be negative")

    @classmethod
    def from_settings(cls) -> RetryPolicy:
        return cls(
            max_attempts=whole_setting("EMAIL_MAX_ATTEMPTS", 4, 1),
            base_delay=number_setting("EMAIL_BACKOFF_BASE_SECONDS", 1.0, 0),
            max_delay=number_setting("EMAIL_BACKOFF_MAX_SECONDS", 30.0, 0),
            retry_after_cap=number_setting("EMAIL_RETRY_AFTER_CAP_SECONDS", 60.0, 0),
        )

    def backoff(self, attempt: int, rng: Callable[[], float] = random.random) -> float:
        """Delay after failed attempt number `attempt` (1-based): "equal jitter" exponential."""
        ceiling = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        return float(ceiling / 2 + rng() * ceiling / 2)


def retry_after_seconds(
    headers: Any, cap: float, now: Callable[[], float] = time.time
) -> float | None:
    """Seconds the server asked us to wait (Retry-After, else X-RateLimit-Reset), capped."""
    if headers is None:
        return None
    wait: float | None = None
    value = headers.get("Retry-After")
    if value:
        value = str(value).strip()
        try:
            wait = float(value)
        except ValueError:
            try:
                wait = email.utils.parsedate_to_datetime(value).timestamp() - now()
            except (TypeError, ValueError, IndexError):
                wait = None
    if wait is None and headers.get("X-RateLimit-Reset"):
        try:
            wait = float(headers.get("X-RateLimit-Reset")) - now()
        except ValueError:
            wait = None
    if wait is None:
        return None
    return min(max(wait, 0.0), cap)


def _error_text(body: bytes | str | None) -> str:
    """SendGrid's error messages from an error body, with anything address-like scrubbed."""
    if not body:
        return "no error details"
    raw = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
    try:
        errors = json.loads(raw).get("errors") or []
        parts = []
        for error in errors:
            text = str(error.get("message") or "error")
            if error.get("field"):
                text += f" (field {error['field']})"
            parts.append(text)
        text = "; ".join(parts) or raw
    except (ValueError, AttributeError, TypeError):
        text = raw
    text = scrub_addresses(" ".join(text.split()))
    return text if len(text) <= _MAX_ERROR_TEXT else text[: _MAX_ERROR_TEXT - 3] + "..."


class SendGridSender:
    """Sends through SendGrid's v3 Mail Send API with the official `sendgrid` client."""

    provider = "sendgrid"

    def __init__(
        self,
        api_key: str,
        sender: Sender,
        *,
        host: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
        rng: Callable[[], float] = random.random,
    ) -> None:
        if not api_key:
            raise ValueError("a SendGrid API key is required")
        if api_key.startswith("@Microsoft.KeyVault("):
            raise ValueError(
                "SENDGRID_API_KEY holds an unresolved Key Vault reference: check the app's "
                "managed identity and its access to the vault"
            )
        if not is_valid_address(sender.email):
            raise ValueError("app setting EMAIL_FROM is not a valid email address")
        host = (host or DEFAULT_HOST).rstrip("/")
        if not host.startswith(("https://", "http://")):
            raise ValueError("SENDGRID_HOST must be an http(s) URL")
        self.sender = sender
        self.host = host
        self.retry = retry or RetryPolicy()
        self.timeout = timeout
        self._sleep = sleep
        self._rng = rng
        self._client = sendgrid.SendGridAPIClient(api_key=api_key, host=host)

    def __repr__(self) -> str:  # no API key
        return f"SendGridSender(host={self.host!r}, retry={self.retry!r})"

    @property
    def client(self) -> sendgrid.SendGridAPIClient:
        """The underlying client; `client.client.request_headers` are sent with every request."""
        return self._client

    def send(self, notification: Notification) -> SendResult:
        return self.send_mail(mail_body(notification, self.sender), event_id=notification.event_id)

    def send_mail(self, body: Mapping[str, Any], *, event_id: str | None = None) -> SendResult:
        """POST one v3 mail body, with retries; the lower level of `send`."""
        attempts = self.retry.max_attempts
        for attempt in range(1, attempts + 1):
            status: int | None = None
            headers: Any = None
            try:
                response = self._client.client.mail.send.post(
                    request_body=dict(body), timeout=self.timeout
                )
            except python_http_client.exceptions.HTTPError as exc:
                status, headers = int(exc.status_code), exc.headers
                detail = f"SendGrid answered {status}: {_error_text(exc.body)}"
                if status < 500 and status not in _RETRYABLE_STATUS:
                    raise PermanentEmailError(detail, status=status) from None
            except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
                reason = getattr(exc, "reason", None) or exc
                detail = f"SendGrid unreachable: {type(exc).__name__}: {reason}"
            else:
                message_id = response.headers.get("X-Message-Id") if response.headers else None
                return SendResult(self.provider, message_id, attempt, response.status_code)
            if attempt == attempts:
                message = f"{detail} (gave up after {attempts} attempts)"
                raise TransientEmailError(message, attempts=attempts, status=status)
            delay = self.retry.backoff(attempt, self._rng)
            if status == 429:
                asked = retry_after_seconds(headers, self.retry.retry_after_cap)
                if asked is not None:
                    delay = max(delay, asked)
            logger.warning(
                "email for event %s: attempt %d of %d failed (%s); retrying in %.1f s",
                event_id, attempt, attempts, detail, delay,
            )  # fmt: skip
            self._sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover


# -- outbox ----------------------------------------------------------------------------------


class OutboxSender:
    """Writes each email's exact v3 mail body to a new blob instead of sending it."""

    provider = "outbox"

    def __init__(
        self,
        sender: Sender,
        *,
        container: str | None = None,
        connection: str = "AzureWebJobsStorage",
        client: ContainerClient | None = None,
    ) -> None:
        """`client`: the outbox container's client; without one, `container` of `connection`."""
        self.sender = sender
        self.container = outbox_container(container) if client is None else client.container_name
        self.connection = connection
        self.client = client

    def __repr__(self) -> str:
        return f"OutboxSender(container={self.container!r})"

    def send(self, notification: Notification) -> SendResult:
        body = mail_body(notification, self.sender)
        name = write_outbox(
            notification.event_id, body, container=self.container, connection=self.connection,
            client=self.client,
        )  # fmt: skip
        return SendResult(self.provider, name, 1, None)


_SENDER_SETTINGS = (
    "SENDGRID_API_KEY", "EMAIL_FROM", "EMAIL_FROM_NAME", "SENDGRID_HOST",
    "EMAIL_MAX_ATTEMPTS", "EMAIL_BACKOFF_BASE_SECONDS", "EMAIL_BACKOFF_MAX_SECONDS",
    "EMAIL_RETRY_AFTER_CAP_SECONDS", "SENDGRID_TIMEOUT_SECONDS", "EMAIL_OUTBOX_CONTAINER",
)  # fmt: skip


def sender_from_settings() -> EmailSender:
    """SendGridSender when SENDGRID_API_KEY is set, else OutboxSender (see module doc).

    Built once per distinct value of its settings, so a process sends every message through
    one client (and its connections), not a new one per message.
    """
    return _sender(tuple(settings.setting(name) for name in _SENDER_SETTINGS))


@functools.lru_cache(maxsize=8)
def _sender(_values: tuple[str | None, ...]) -> EmailSender:
    api_key = settings.setting("SENDGRID_API_KEY")
    name = settings.setting("EMAIL_FROM_NAME")
    if api_key:
        return SendGridSender(
            api_key,
            Sender(settings.require("EMAIL_FROM"), name),
            host=settings.setting("SENDGRID_HOST"),
            retry=RetryPolicy.from_settings(),
            timeout=number_setting("SENDGRID_TIMEOUT_SECONDS", 10.0, 0.1),
        )
    return OutboxSender(Sender(settings.setting("EMAIL_FROM", OUTBOX_DEFAULT_FROM) or "", name))
