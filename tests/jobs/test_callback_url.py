"""Which callback URLs are refused: scheme, credentials, metadata and link-local addresses,
checked on every address the host resolves to."""

from __future__ import annotations

import pytest

from shared.jobs.callback_url import check_callback_url
from shared.jobs.errors import BlockedCallback, UnresolvableCallback


def resolver(*addresses: str):  # a DNS answer of our choosing, for names we cannot register
    return lambda host, port: list(addresses)


PUBLIC = resolver("93.184.215.14")


def test_https_to_a_public_address_is_accepted_with_its_target() -> None:
    target = check_callback_url("https://hooks.example.com/jobs/done?x=1", resolver=PUBLIC)
    assert (target.host, target.port, target.target) == ("hooks.example.com", 443, "/jobs/done?x=1")
    assert target.addresses == ("93.184.215.14",)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/cb",
        "http://localhost:9/cb",
        "http://[::1]:8080/",
        "http://2130706433/",
    ],
)
def test_plain_http_is_allowed_to_loopback_only(url: str) -> None:
    assert check_callback_url(url).scheme == "http"


def test_plain_http_to_anything_else_is_refused() -> None:
    with pytest.raises(BlockedCallback, match="https"):
        check_callback_url("http://hooks.example.com/cb", resolver=PUBLIC)


@pytest.mark.parametrize(
    "url",
    [
        "https://169.254.169.254/latest/meta-data/",
        "https://0xa9fea9fe/",  # the same address, spelled in hex
        "https://[fd00:ec2::254]/",
        "https://100.100.100.200/",
        "https://168.63.129.16/",
        "https://[::ffff:169.254.169.254]/",
        "https://[64:ff9b::a9fe:a9fe]/",  # NAT64 form of 169.254.169.254
        "https://[fe80::1]/",
        "https://0.0.0.0/",
        "https://metadata.google.internal/computeMetadata/v1/",
        "https://METADATA.google.internal./",
    ],
)
def test_metadata_and_link_local_addresses_are_refused(url: str) -> None:
    with pytest.raises(BlockedCallback):
        check_callback_url(url)


def test_every_resolved_address_is_checked() -> None:
    sneaky = resolver("93.184.215.14", "169.254.169.254")
    with pytest.raises(BlockedCallback, match=r"169\.254\.169\.254"):
        check_callback_url("https://rebind.example.com/", resolver=sneaky)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://example.com/x", "https"),
        ("https://user:secret@example.com/", "credentials"),
        ("https:///no-host", "no host"),
        ("https://example.com/a b", "spaces"),
        ("https://example.com:99999/", "valid URL"),
        ("", "non-empty"),
    ],
)
def test_malformed_urls_are_refused_with_a_reason(url: str, reason: str) -> None:
    with pytest.raises(BlockedCallback, match=reason):
        check_callback_url(url, resolver=PUBLIC)


def test_a_host_that_does_not_resolve_is_refused() -> None:
    with pytest.raises(UnresolvableCallback):
        check_callback_url("https://nothing-here.invalid/")
