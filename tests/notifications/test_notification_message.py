"""Parsing and validating notification queue messages: every bad input fails with a clear reason."""

from __future__ import annotations

import json
import time

import pytest
from pydantic import ValidationError

from shared.notifications import InvalidNotification, Notification
from shared.notifications.addresses import is_valid_address, scrub_addresses
from shared.notifications.message import MAX_BODY_BYTES

ADDRESS = "ada.lovelace@example.com"


def body(**overrides: object) -> dict[str, object]:
    data: dict[str, object] = {
        "event_id": "order-42-shipped",
        "type": "order.shipped",
        "to": ADDRESS,
        "subject": "Your order has shipped",
        "text": "It is on its way.",
    }
    for name, value in overrides.items():
        if value is ...:
            data.pop(name, None)
        else:
            data[name] = value
    return data


def parse(data: object) -> Notification:
    return Notification.parse(json.dumps(data).encode())


def invalid(data: object | bytes | str) -> InvalidNotification:
    raw = data if isinstance(data, bytes | str) else json.dumps(data)
    with pytest.raises(InvalidNotification) as info:
        Notification.parse(raw)
    return info.value


# -- valid messages ----------------------------------------------------------------------------


def test_minimal_text_message() -> None:
    n = parse(body())
    assert n.event_id == "order-42-shipped"
    assert n.type == "order.shipped"
    assert n.to == (ADDRESS,)
    assert n.text == "It is on its way." and n.html is None and n.template_id is None


def test_html_and_text_together() -> None:
    n = parse(body(html="<p>It is on its way.</p>"))
    assert n.html == "<p>It is on its way.</p>"


def test_template_with_data() -> None:
    n = parse(body(text=..., template_id="d-" + "a" * 32, template_data={"order": {"id": 42}}))
    assert n.template_id == "d-" + "a" * 32
    assert n.template_data == {"order": {"id": 42}}


def test_template_data_is_optional() -> None:
    assert parse(body(text=..., template_id="d-1")).template_data is None


def test_list_of_recipients_deduplicated_case_insensitively() -> None:
    n = parse(body(to=["a@example.com", "b@example.org", "A@Example.com"]))
    assert n.to == ("a@example.com", "b@example.org")


def test_bytes_str_and_constructor_agree() -> None:
    raw = json.dumps(body())
    assert (
        Notification.parse(raw)
        == Notification.parse(raw.encode())
        == Notification(
            event_id="order-42-shipped",
            type="order.shipped",
            to=ADDRESS,  # type: ignore[arg-type]  # normalised to a tuple
            subject="Your order has shipped",
            text="It is on its way.",
        )
    )


def test_to_json_round_trips() -> None:
    n = parse(body(to=["a@example.com", "b@example.com"], html="<b>x</b>"))
    assert Notification.parse(n.to_json()) == n


def test_repr_hides_addresses_and_body() -> None:
    text = repr(parse(body(html="<p>secret body</p>")))
    assert ADDRESS not in text and "secret body" not in text and "order-42-shipped" in text


def test_template_data_is_a_private_copy() -> None:
    data = {"a": [1]}
    n = Notification(event_id="e1", type="t", to=("a@example.com",), subject="s",
                     template_id="d-1", template_data=data)  # fmt: skip
    data["a"].append(2)
    assert n.template_data == {"a": [1]}


def test_message_at_the_size_limit_is_accepted() -> None:
    filler = MAX_BODY_BYTES - len(json.dumps(body(text="")).encode())
    raw = json.dumps(body(text="x" * filler)).encode()
    assert len(raw) == MAX_BODY_BYTES
    assert Notification.parse(raw).text == "x" * filler


# -- invalid messages --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "field", "reason"),
    [
        (b"not json at all", "body", "is not valid JSON"),
        (b"", "body", "is not valid JSON"),
        (b"\xff\xfe{}", "body", "is not UTF-8"),
        (b"[1, 2]", "body", "must be a JSON object, not array"),
        (b'"just a string"', "body", "must be a JSON object, not string"),
        (b"null", "body", "must be a JSON object, not null"),
        (b'{"event_id": NaN}', "body", "NaN is not valid JSON"),
    ],
)
def test_body_that_is_not_a_json_object(raw: bytes, field: str, reason: str) -> None:
    error = invalid(raw)
    assert error.field == field and reason in error.reason
    assert str(error).startswith("invalid notification: ")


@pytest.mark.parametrize("name", ["event_id", "type", "to", "subject"])
def test_missing_required_field(name: str) -> None:
    error = invalid(body(**{name: ...}))
    assert (error.field, error.reason) == (name, "is missing")


def test_missing_body_content() -> None:
    error = invalid(body(text=...))
    assert error.field == "body" and "needs text, html, or template_id" in error.reason


@pytest.mark.parametrize(
    ("overrides", "field", "reason"),
    [
        ({"type": ""}, "type", "must not be empty"),
        ({"type": 3}, "type", "must be a string, not number"),
        ({"subject": ""}, "subject", "must not be empty"),
        ({"subject": "   "}, "subject", "must not be empty"),
        ({"subject": "x" * 999}, "subject", "999 characters long, the limit is 998"),
        ({"subject": "Hello\r\nBcc: victim@example.com"}, "subject", "line breaks"),
        ({"text": ""}, "text", "non-empty string"),
        ({"text": None}, "text", "must not be null"),
        ({"html": 5}, "html", "must be a string, not number"),
        ({"template_id": "d-1"}, "template_id", "cannot be combined with text or html"),
        ({"text": ..., "template_id": "../etc"}, "template_id", "only letters, digits"),
        ({"text": ..., "template_id": "d-1", "template_data": [1]}, "template_data", "object"),
        ({"template_data": {"a": 1}}, "template_data", "needs template_id"),
        ({"from": "ceo@example.com"}, "from", "not allowed"),
        ({"reply_to": "x@example.com"}, "reply_to", "not allowed"),
        ({"htm": "<p>typo</p>"}, "'htm'", "is not a known field"),
    ],
)
def test_invalid_field(overrides: dict[str, object], field: str, reason: str) -> None:
    error = invalid(body(**overrides))
    assert error.field == field and reason in error.reason


def test_duplicate_key_is_rejected() -> None:
    raw = '{"event_id": "a", "event_id": "b", "type": "t", "to": "a@example.com", "subject": "s"}'
    error = invalid(raw)
    assert error.field == "'event_id'" and "more than once" in error.reason


@pytest.mark.parametrize(
    ("event_id", "reason"),
    [
        ("", "must not be empty"),
        ("   ", "must not be empty"),
        (42, "must be a string"),
        (None, "must be a string"),
        ("../x", "path segment"),
        ("a/../../b", "path segment"),
        ("/absolute", "path segment"),
        ("..", "path segment"),
        ("a\\..\\b", "path segment"),
        ("line\nbreak", "control characters"),
        ("nul\x00byte", "control characters"),
        ("bell\x07", "control characters"),
        ("bidi\u202eoverride", "control characters"),
        ("x" * 129, "129 characters long, the limit is 128"),
    ],
)
def test_bad_event_id(event_id: object, reason: str) -> None:
    error = invalid(body(event_id=event_id))
    assert error.field == "event_id" and reason in error.reason


def test_event_id_at_the_length_limit() -> None:
    assert parse(body(event_id="x" * 128)).event_id == "x" * 128


@pytest.mark.parametrize(
    ("to", "field", "reason"),
    [
        ([], "to", "at least one recipient"),
        ({"email": ADDRESS}, "to", "an address or an array of them, not object"),
        (42, "to", "not number"),
        ([ADDRESS, 42], "to[1]", "must be a string, not number"),
        ("not-an-address", "to", "not a valid email address"),
        ([ADDRESS, "Ada <ada@example.com>"], "to[1]", "not a valid email address"),
        ([f"user{i}@example.com" for i in range(51)], "to", "51 recipients, the limit is 50"),
    ],
)
def test_bad_recipients(to: object, field: str, reason: str) -> None:
    error = invalid(body(to=to))
    assert error.field == field and reason in error.reason


def test_fifty_recipients_are_allowed() -> None:
    assert len(parse(body(to=[f"user{i}@example.com" for i in range(50)])).to) == 50


def test_oversized_message() -> None:
    raw = json.dumps(body(text="x" * MAX_BODY_BYTES)).encode()
    error = invalid(raw)
    assert error.field == "body" and f"the limit is {MAX_BODY_BYTES}" in error.reason


def test_oversized_when_built_directly() -> None:
    """A producer's own bug: pydantic's error, the value hidden from it too."""
    with pytest.raises(ValidationError, match="the limit is 65536") as info:
        Notification(event_id="e", type="t", to=("a@example.com",), subject="s",
                     html="x" * MAX_BODY_BYTES)  # fmt: skip
    assert "xxxx" not in str(info.value) and "input_value" not in str(info.value)


def test_errors_never_contain_addresses_or_body() -> None:
    secret = "top secret body text"
    cases = [
        body(to=["ok@example.com", "bad address@example.com"]),
        body(to="no-at-sign.example.com"),
        body(subject="x" * 1000, text=secret),
        body(**{"victim@example.com": "unknown field named like an address"}),
        body(event_id="../" + ADDRESS, text=secret),
    ]
    for case in cases:
        message = str(invalid(case))
        assert "@example.com" not in message and secret not in message, message


# -- address syntax ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        "a@example.com",
        "first.last@sub.example.co.uk",
        "user+tag@example.com",
        "o'brien@example.ie",
        "x_y-z@e-x.example",
        "!#$%&'*+/=?^_`{|}~-@example.com",
        "a@" + "b" * 63 + ".com",
    ],
)
def test_valid_addresses(address: str) -> None:
    assert is_valid_address(address)


@pytest.mark.parametrize(
    "address",
    [
        "",
        "plain",
        "@example.com",
        "a@",
        "a@localhost",
        "a@@example.com",
        "a b@example.com",
        ".a@example.com",
        "a.@example.com",
        "a..b@example.com",
        "a@-example.com",
        "a@example-.com",
        "a@example..com",
        "a@1.2.3.4",
        "a@[127.0.0.1]",
        '"quoted"@example.com',
        "Ada <ada@example.com>",
        "ada@example.com\n",
        "üser@example.com",
        "a@exämple.com",
        "a@" + "b" * 64 + ".com",
        "x" * 65 + "@example.com",
        "a@" + ".".join(["b" * 60] * 5) + ".com",
        None,
        42,
    ],
)
def test_invalid_addresses(address: object) -> None:
    assert not is_valid_address(address)


def test_scrub_addresses() -> None:
    text = "rejected <ada@example.com>, and bob.smith+x@mail.example.org too"
    assert scrub_addresses(text) == "rejected <<address>>, and <address> too"
    assert scrub_addresses("a@b@c x@") == "<address>@c x@"


@pytest.mark.parametrize("body", ["x" * 1_000_000, "x@" * 500_000, ("y" * 999 + "@ ") * 1000])
def test_scrubbing_a_long_error_body_takes_linear_time(body: str) -> None:
    """The pattern tried every start of a run again: 8,000 characters took 0.1 s, 1 MB hours.

    Measured in this thread's CPU time, which a busy machine does not stretch as it stretches
    the wall clock: about 0.02 s for each of these bodies, against over 1,000 s for the
    quadratic pattern. The bound is 100 times the first."""
    started = time.thread_time()
    scrub_addresses(body)
    assert time.thread_time() - started < 2.0
