"""Which callback URLs are refused: scheme, credentials, non-public and metadata addresses in
every spelling, checked on every address the host resolves to; what an allow-list opens."""

from __future__ import annotations

import socket
import threading

import pytest

from shared.jobs.callback_url import CallbackPolicy, check_callback_url, parse_networks, resolve
from shared.jobs.errors import BlockedCallback, UnresolvableCallback
from shared.settings import parse_flag


def resolver(*addresses: str):  # a DNS answer of our choosing, for names we cannot register
    return lambda host, port, seconds: list(addresses)


PUBLIC = resolver("93.184.215.14")
LOCAL = CallbackPolicy(parse_networks("127.0.0.0/8, ::1/128", "test"), allow_http=True)


def test_https_to_a_public_address_is_accepted_with_its_target() -> None:
    target = check_callback_url("https://hooks.example.com/jobs/done?x=1", resolver=PUBLIC)
    assert (target.host, target.port, target.target) == ("hooks.example.com", 443, "/jobs/done?x=1")
    assert target.addresses == ("93.184.215.14",)


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/cb",
        "http://127.0.0.1:8080/cb",
        "https://localhost:9/cb",
        "https://[::1]:8080/",
        "https://10.1.2.3/",
        "https://172.16.0.1/",
        "https://192.168.1.1/",
        "https://100.64.0.1/",  # carrier-grade NAT
        "https://[fd12:3456::1]/",  # unique local
        "https://[fc00::1]/",
        "https://[::ffff:127.0.0.1]/",  # IPv4-mapped
        "https://[::ffff:10.0.0.1]/",
        "https://[::127.0.0.1]/",  # IPv4-compatible
        "https://[::a00:1]/",  # ::10.0.0.1, IPv4-compatible
        "https://[2002:7f00:1::]/",  # 6to4 of 127.0.0.1
        "https://[64:ff9b::a00:1]/",  # NAT64 of 10.0.0.1
        "https://192.0.2.1/",  # documentation
        "https://198.18.0.1/",  # benchmarking
        "https://[fec0::1]/",  # site-local
    ],
)
def test_loopback_private_and_embedded_forms_are_refused_by_default(url: str) -> None:
    with pytest.raises(BlockedCallback):
        check_callback_url(url, resolver=resolver("127.0.0.1"))


@pytest.mark.parametrize(
    "url",
    [
        "https://2130706433/",  # 127.0.0.1 as one number
        "https://0x7f000001/",
        "https://0177.0.0.1/",  # octal
        "https://127.1/",  # short form
        "https://0x7f.0.0.1/",
        "https://017700000001/",
        "https://010.0.0.1/",
    ],
)
def test_numeric_host_spellings_are_refused_before_any_lookup(url: str) -> None:
    def must_not_resolve(host: str, port: int, seconds: float) -> list[str]:
        raise AssertionError(f"looked up {host}")

    with pytest.raises(BlockedCallback, match="dotted quad"):
        check_callback_url(url, resolver=must_not_resolve, policy=LOCAL)


def test_a_name_resolving_to_loopback_is_refused() -> None:
    with pytest.raises(BlockedCallback, match="loopback"):
        check_callback_url("https://localhost/cb")  # the real resolver


def test_plain_http_is_refused_unless_the_development_setting_allows_it() -> None:
    with pytest.raises(BlockedCallback, match="https"):
        check_callback_url("http://hooks.example.com/cb", resolver=PUBLIC)
    allowed = CallbackPolicy(allow_http=True)
    assert check_callback_url("http://hooks.example.com/cb", resolver=PUBLIC, policy=allowed)


def test_the_allow_list_opens_exactly_the_networks_it_names() -> None:
    vnet = CallbackPolicy(parse_networks("10.20.0.0/24", "JOB_CALLBACK_ALLOWED_NETWORKS"))
    inside = check_callback_url("https://receiver.internal/cb", resolver=resolver("10.20.0.7"),
                                policy=vnet)  # fmt: skip
    assert inside.addresses == ("10.20.0.7",)
    with pytest.raises(BlockedCallback, match=r"10\.20\.1\.7"):
        check_callback_url("https://other.internal/", resolver=resolver("10.20.1.7"), policy=vnet)
    with pytest.raises(BlockedCallback, match="loopback"):
        check_callback_url("https://127.0.0.1/", policy=vnet)
    # the mapped spelling of an allowed address is not itself on the list
    with pytest.raises(BlockedCallback):
        check_callback_url("https://[::ffff:10.20.0.7]/", policy=vnet)
    assert check_callback_url("http://127.0.0.1:8080/cb", policy=LOCAL).addresses == ("127.0.0.1",)


@pytest.mark.parametrize(
    "url",
    [
        "https://169.254.169.254/latest/meta-data/",
        "https://[fd00:ec2::254]/",
        "https://100.100.100.200/",
        "https://168.63.129.16/",
        "https://[::ffff:169.254.169.254]/",
        "https://[64:ff9b::a9fe:a9fe]/",  # NAT64 form of 169.254.169.254
        "https://[fe80::1]/",
        "https://0.0.0.0/",
        "https://224.0.0.1/",
        "https://metadata.google.internal/computeMetadata/v1/",
        "https://METADATA.google.internal./",
    ],
)
def test_metadata_and_link_local_addresses_are_refused_even_when_allow_listed(url: str) -> None:
    everything = CallbackPolicy(parse_networks("0.0.0.0/0, ::/0", "test"), allow_http=True)
    with pytest.raises(BlockedCallback):
        check_callback_url(url, policy=everything)


def test_every_resolved_address_is_checked() -> None:
    sneaky = resolver("93.184.215.14", "10.0.0.5")
    with pytest.raises(BlockedCallback, match=r"10\.0\.0\.5"):
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
        ("https://example.com/caf\u00e9", "ASCII"),
        ("https://b\u00fccher.example/cb", "ASCII"),
        ("https://example.com/\u2028", "ASCII"),
    ],
)
def test_malformed_urls_are_refused_with_a_reason(url: str, reason: str) -> None:
    with pytest.raises(BlockedCallback, match=reason):
        check_callback_url(url, resolver=PUBLIC)


def test_a_host_that_does_not_resolve_is_refused() -> None:
    with pytest.raises(UnresolvableCallback):
        check_callback_url("https://nothing-here.invalid/")


def test_a_slow_lookup_is_cut_at_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    release, answered = threading.Event(), threading.Event()

    def hanging_dns(*args: object, **kwargs: object) -> list[object]:
        release.wait(60)  # a resolver that takes its time (ended when the test is done)
        answered.set()
        return []

    monkeypatch.setattr(socket, "getaddrinfo", hanging_dns)
    with pytest.raises(UnresolvableCallback, match=r"within 0\.3 s"):
        resolve("slow.example.com", 443, 0.3)
    assert not answered.is_set()  # given up on while the resolver still hung, not after it
    release.set()


@pytest.mark.parametrize("raw", ["10.0.0.0/33", "10.0.0.1/8", "nonsense"])
def test_a_bad_allow_list_names_its_setting(raw: str) -> None:
    with pytest.raises(ValueError, match="JOB_CALLBACK_ALLOWED_NETWORKS"):
        parse_networks(raw, "JOB_CALLBACK_ALLOWED_NETWORKS")
    with pytest.raises(ValueError, match="JOB_CALLBACK_ALLOW_HTTP"):
        parse_flag("yes please", "JOB_CALLBACK_ALLOW_HTTP")
