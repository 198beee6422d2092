"""The SendGrid path against Prism serving SendGrid's published OpenAPI spec.

Prism validates each request against the spec: 202 means the real API's contract accepts the
request, a 4xx means it does not. `Prefer: code=N` makes Prism answer with status N.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator

import pytest
from blobsingleton.errors import SettingMissing

from harness.services import free_port
from shared.notifications import (
    Notification,
    OutboxSender,
    PermanentEmailError,
    RetryPolicy,
    Sender,
    SendGridSender,
    TransientEmailError,
    mail_body,
    sender_from_settings,
)
from shared.notifications.sender import retry_after_seconds

API_KEY = "SG.test-key-never-logged.0123456789"
FROM = Sender("notifications@example.com", "Example Notifications")
FAST = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.02, retry_after_cap=60.0)


class Sleeps(list[float]):
    """Records the backoff delays instead of sleeping them."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def make_sender(
    url: str, sleeps: Sleeps, retry: RetryPolicy = FAST, timeout: float = 10.0
) -> SendGridSender:
    return SendGridSender(API_KEY, FROM, host=url, retry=retry, sleep=sleeps, timeout=timeout)


def note(**fields: object) -> Notification:
    data: dict[str, object] = {
        "event_id": "order-42-shipped",
        "type": "order.shipped",
        "to": "ada@example.com",
        "subject": "Your order has shipped",
    }
    data.update(fields)
    return Notification.from_data(data)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


# -- requests the contract accepts ------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"text": "It is on its way."},
        {"html": "<p>It is on its way.</p>"},
        {"text": "It is on its way.", "html": "<p>It is on its way.</p>"},
        {"template_id": "d-" + "0" * 32, "template_data": {"order": {"id": 42, "items": [1, 2]}}},
        {"template_id": "d-" + "1" * 32},
        {"to": ["ada@example.com", "grace@example.org", "alan+x@example.net"], "text": "Hi"},
        {"event_id": "tenant/Ünïcode event:42", "text": "non-ASCII event id, still accepted"},
    ],
    ids=["text", "html", "text+html", "template", "template-no-data", "three-recipients", "uni"],
)
def test_accepted_by_the_contract(sendgrid_url: str, sleeps: Sleeps, fields: dict) -> None:
    notification = note(**fields)
    result = make_sender(sendgrid_url, sleeps).send(notification)
    assert (result.provider, result.status, result.attempts) == ("sendgrid", 202, 1)
    assert sleeps == []
    assert result.to_dict()["provider"] == "sendgrid"


def test_mail_body_shape() -> None:
    n = note(to=["ada@example.com", "grace@example.org"], text="t", html="<p>h</p>")
    body = mail_body(n, FROM)
    assert body["from"] == {"email": FROM.email, "name": FROM.name}
    assert body["subject"] == n.subject
    assert body["content"] == [
        {"type": "text/plain", "value": "t"},
        {"type": "text/html", "value": "<p>h</p>"},
    ]
    # One personalization per recipient, so recipients never see each other's address.
    assert body["personalizations"] == [
        {"to": [{"email": "ada@example.com"}], "custom_args": {"event_id": n.event_id}},
        {"to": [{"email": "grace@example.org"}], "custom_args": {"event_id": n.event_id}},
    ]
    assert "custom_args" not in body  # typed as a string at message level in the spec


def test_template_body_shape() -> None:
    n = note(template_id="d-abc", template_data={"name": "Ada"})
    body = mail_body(n, Sender("n@example.com"))
    assert body["template_id"] == "d-abc" and "content" not in body
    assert body["from"] == {"email": "n@example.com"}
    assert body["personalizations"][0]["dynamic_template_data"] == {"name": "Ada"}


# -- requests the contract refuses: permanent --------------------------------------------------


def test_request_the_spec_rejects_is_permanent(sendgrid_url: str, sleeps: Sleeps) -> None:
    sender = make_sender(sendgrid_url, sleeps)
    body = mail_body(note(text="x"), FROM)
    del body["from"]  # bypass our validation: `from` is required by the spec
    with pytest.raises(PermanentEmailError) as info:
        sender.send_mail(body, event_id="e1")
    assert info.value.status == 400
    assert str(info.value).startswith("SendGrid answered 400: ")
    assert API_KEY not in str(info.value) and "ada@example.com" not in str(info.value)
    assert sleeps == []  # not retried


def test_missing_credentials_is_permanent(sendgrid_url: str, sleeps: Sleeps) -> None:
    sender = make_sender(sendgrid_url, sleeps)
    sender.client.client.request_headers.pop("Authorization")
    with pytest.raises(PermanentEmailError) as info:
        sender.send(note(text="x"))
    assert info.value.status == 401 and sleeps == []


def test_documented_4xx_status_is_permanent(sendgrid_url: str, sleeps: Sleeps) -> None:
    sender = make_sender(sendgrid_url, sleeps)
    sender.client.client.request_headers["Prefer"] = "code=413"
    with pytest.raises(PermanentEmailError, match="SendGrid answered 413"):
        sender.send(note(text="x"))


# -- failures that may pass later: retried, then transient -------------------------------------


def test_server_error_is_retried_then_transient(sendgrid_url: str, sleeps: Sleeps) -> None:
    sender = make_sender(sendgrid_url, sleeps)
    sender.client.client.request_headers["Prefer"] = "code=500"
    with pytest.raises(TransientEmailError) as info:
        sender.send(note(text="x"))
    assert info.value.attempts == 3 and info.value.status == 500
    assert "SendGrid answered 500" in str(info.value) and "after 3 attempts" in str(info.value)
    assert len(sleeps) == 2
    # Equal-jitter exponential backoff: attempt n waits in [d/2, d], d = min(max, base * 2^(n-1)).
    assert 0.005 <= sleeps[0] <= 0.01 and 0.01 <= sleeps[1] <= 0.02


def test_recovers_when_the_server_does(sendgrid_url: str) -> None:
    sender: SendGridSender

    def heal(_: float) -> None:  # the outage ends during the first backoff
        sender.client.client.request_headers.pop("Prefer", None)

    sender = SendGridSender(API_KEY, FROM, host=sendgrid_url, retry=FAST, sleep=heal)
    sender.client.client.request_headers["Prefer"] = "code=500"
    result = sender.send(note(text="x"))
    assert (result.status, result.attempts) == (202, 2)


def test_429_honours_retry_after(sendgrid_429_url: str, sleeps: Sleeps) -> None:
    sender = make_sender(sendgrid_429_url, sleeps)
    sender.client.client.request_headers["Prefer"] = "code=429"
    with pytest.raises(TransientEmailError) as info:
        sender.send(note(text="x"))
    assert info.value.attempts == 3 and info.value.status == 429
    assert sleeps == [7.0, 7.0]  # Retry-After: 7 from the response, larger than the backoff


def test_429_retry_after_is_capped(sendgrid_429_url: str, sleeps: Sleeps) -> None:
    retry = RetryPolicy(max_attempts=2, base_delay=0.01, max_delay=0.01, retry_after_cap=0.5)
    sender = make_sender(sendgrid_429_url, sleeps, retry)
    sender.client.client.request_headers["Prefer"] = "code=429"
    with pytest.raises(TransientEmailError):
        sender.send(note(text="x"))
    assert sleeps == [0.5]


def test_connection_refused_is_transient(sleeps: Sleeps) -> None:
    sender = make_sender(f"http://127.0.0.1:{free_port()}", sleeps)
    with pytest.raises(TransientEmailError, match="SendGrid unreachable") as info:
        sender.send(note(text="x"))
    assert info.value.attempts == 3 and info.value.status is None and len(sleeps) == 2


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers (a hung upstream)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


def test_timeout_is_transient(silent_port: int, sleeps: Sleeps) -> None:
    retry = RetryPolicy(max_attempts=2, base_delay=0.01, max_delay=0.01)
    sender = make_sender(f"http://127.0.0.1:{silent_port}", sleeps, retry, timeout=0.3)
    started = time.monotonic()
    with pytest.raises(TransientEmailError, match="SendGrid unreachable") as info:
        sender.send(note(text="x"))
    # Two attempts cut at 0.3 s each; the bound is ten times that (a hung upstream: forever).
    assert info.value.attempts == 2 and time.monotonic() - started < 10 * 2 * 0.3


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"Retry-After": "3"}, 3.0),
        ({"Retry-After": "0.5"}, 0.5),
        ({"Retry-After": "-4"}, 0.0),
        ({"Retry-After": "600"}, 60.0),
        ({"Retry-After": "Thu, 01 Jan 1970 00:01:40 GMT"}, 10.0),  # now() == 90
        ({"Retry-After": "garbage"}, None),
        ({"X-RateLimit-Reset": "100"}, 10.0),
        ({"X-RateLimit-Reset": "soon"}, None),
    ],
)
def test_retry_after_parsing(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after_seconds(headers, cap=60.0, now=lambda: 90.0) == expected


# -- secrets and personal data stay out of the logs --------------------------------------------


def test_logs_never_hold_the_key_or_addresses(
    sendgrid_url: str, sleeps: Sleeps, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    sender = make_sender(sendgrid_url, sleeps)
    sender.send(note(text="hello"))
    sender.client.client.request_headers["Prefer"] = "code=500"
    with pytest.raises(TransientEmailError):
        sender.send(note(text="hello"))
    assert "attempt 1 of 3 failed" in caplog.text  # our own retry log is there
    assert API_KEY not in caplog.text and "ada@example.com" not in caplog.text
    assert API_KEY not in repr(sender)


# -- choosing the sender from app settings -----------------------------------------------------


def test_sender_from_settings_sendgrid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SENDGRID_API_KEY", API_KEY)
    monkeypatch.setenv("EMAIL_FROM", "alerts@example.com")
    monkeypatch.setenv("EMAIL_FROM_NAME", "Alerts")
    monkeypatch.setenv("SENDGRID_HOST", "https://api.eu.sendgrid.com")
    monkeypatch.setenv("EMAIL_MAX_ATTEMPTS", "6")
    sender = sender_from_settings()
    assert isinstance(sender, SendGridSender)
    assert sender.host == "https://api.eu.sendgrid.com"
    assert sender.sender == Sender("alerts@example.com", "Alerts")
    assert sender.retry.max_attempts == 6


def test_sender_from_settings_needs_email_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SENDGRID_API_KEY", API_KEY)
    monkeypatch.delenv("EMAIL_FROM", raising=False)
    with pytest.raises(SettingMissing, match="EMAIL_FROM"):
        sender_from_settings()


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("SENDGRID_API_KEY", "@Microsoft.KeyVault(SecretUri=https://v/secrets/k)", "Key Vault"),
        ("EMAIL_FROM", "not an address", "EMAIL_FROM"),
        ("SENDGRID_HOST", "api.sendgrid.com", "SENDGRID_HOST"),
        ("EMAIL_MAX_ATTEMPTS", "many", "EMAIL_MAX_ATTEMPTS"),
        ("EMAIL_MAX_ATTEMPTS", "0", "EMAIL_MAX_ATTEMPTS"),
    ],
)
def test_sender_from_settings_misconfigured(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv("SENDGRID_API_KEY", API_KEY)
    monkeypatch.setenv("EMAIL_FROM", "alerts@example.com")
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        sender_from_settings()


def test_sender_from_settings_outbox(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SENDGRID_API_KEY", raising=False)
    monkeypatch.setenv("EMAIL_OUTBOX_CONTAINER", "my-outbox")
    sender = sender_from_settings()
    assert isinstance(sender, OutboxSender) and sender.container == "my-outbox"
