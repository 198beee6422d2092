"""Which callback URLs the app will POST to: a guard against server-side request forgery.

A job's callback URL comes from whoever submits the job, and the app calls it from inside
the cloud network. So: https only (plain http only to loopback, for development); no
credentials in the URL; and never a link-local or cloud metadata address, checked on every
address the host name resolves to, including IPv4 addresses embedded in IPv6 ones.
The check runs when the job is submitted and again before each POST, and the POST connects
to exactly the address that was checked (see shared.jobs.callback), so a DNS answer that
changes in between cannot redirect it. Private (RFC 1918) addresses are allowed: receivers
inside a virtual network are legitimate.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from shared.jobs.errors import BlockedCallback, UnresolvableCallback

MAX_URL_LENGTH = 2048

BLOCKED_HOSTNAMES = frozenset({"metadata.google.internal", "metadata.goog", "metadata"})

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

BLOCKED_NETWORKS: tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str], ...] = tuple(
    (ipaddress.ip_network(net), why)
    for net, why in (
        ("169.254.0.0/16", "link-local (instance metadata)"),
        ("fe80::/10", "link-local"),
        ("fd00:ec2::254/128", "the AWS metadata service"),
        ("100.100.100.200/32", "the Alibaba Cloud metadata service"),
        ("168.63.129.16/32", "the Azure platform (WireServer) address"),
        ("0.0.0.0/8", "unspecified"),
        ("::/128", "unspecified"),
        ("224.0.0.0/4", "multicast"),
        ("ff00::/8", "multicast"),
        ("240.0.0.0/4", "reserved"),
    )
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")

#: (host, port) -> every address it resolves to.
Resolver = Callable[[str, int], list[str]]


def resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to (IPv4 and IPv6)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise UnresolvableCallback(f"callback host {host!r} does not resolve: {error}") from error
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class CallbackTarget:
    """A checked callback URL and the addresses it was checked against."""

    url: str
    scheme: str
    host: str
    port: int
    target: str  # path and query, as sent in the request line
    addresses: tuple[str, ...]


def _embedded(address: IPAddress) -> list[IPAddress]:
    """The address itself and any IPv4 address it carries (mapped, 6to4, Teredo, NAT64)."""
    found: list[IPAddress] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        for inner in (address.ipv4_mapped, address.sixtofour):
            if inner is not None:
                found.append(inner)
        if address.teredo is not None:
            found.extend(address.teredo)
        if address in _NAT64:
            found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def blocked_reason(address: str) -> str | None:
    """Why the app must not call `address`, or None if it may."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    for candidate in _embedded(ip):
        for network, why in BLOCKED_NETWORKS:
            if candidate.version == network.version and candidate in network:
                return why
        if candidate.is_link_local:
            return "link-local"
    return None


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    return any(candidate.is_loopback for candidate in _embedded(ip))


def check_callback_url(url: object, *, resolver: Resolver = resolve) -> CallbackTarget:
    """The checked target of `url`; `BlockedCallback` saying why the app refuses it."""
    if not isinstance(url, str) or not url:
        raise BlockedCallback("callback_url must be a non-empty string")
    if len(url) > MAX_URL_LENGTH:
        raise BlockedCallback(f"callback_url is longer than {MAX_URL_LENGTH} characters")
    if any(ord(ch) <= 32 or ord(ch) == 127 for ch in url):
        raise BlockedCallback("callback_url contains spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise BlockedCallback(f"callback_url is not a valid URL: {error}") from error
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http"):
        raise BlockedCallback("callback_url must be an https:// URL")
    if parts.username is not None or parts.password is not None:
        raise BlockedCallback("callback_url must not contain credentials")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise BlockedCallback("callback_url has no host")
    if host in BLOCKED_HOSTNAMES:
        raise BlockedCallback(f"callback host {host!r} is a cloud metadata service")
    port = port or (443 if scheme == "https" else 80)
    addresses = resolver(host, port)
    if not addresses:
        raise UnresolvableCallback(f"callback host {host!r} does not resolve")
    for address in addresses:
        why = blocked_reason(address)
        if why:
            raise BlockedCallback(f"callback host {host!r} resolves to {address}: {why}")
    if scheme == "http" and not all(_is_loopback(a) for a in addresses):
        raise BlockedCallback("callback_url must use https (plain http only to loopback)")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return CallbackTarget(url, scheme, host, port, target, tuple(addresses))
