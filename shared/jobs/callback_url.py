"""Which callback URLs the app will POST to: a guard against server-side request forgery.

A job's callback URL comes from whoever holds a function key, and the app calls it from
inside the cloud network. So, checked when the job is submitted and again before each POST:

- ASCII only (a path or an international name must be percent-encoded or in its `xn--`
  form), no spaces or control characters, at most 2,048 characters, no credentials;
- `https` only; plain `http` only where JOB_CALLBACK_ALLOW_HTTP says so (development);
- the host is a DNS name, a dotted-quad IPv4 address or a bracketed IPv6 address; the
  other numeric spellings the C resolver accepts (`2130706433`, `0x7f.1`, `0177.0.0.1`,
  `127.1`) are refused outright, whatever they stand for;
- every address the name resolves to, and every IPv4 address embedded in it (IPv4-mapped
  `::ffff:a.b.c.d`, 6to4, NAT64), must be a public (globally routable) unicast address, or
  lie in a network that JOB_CALLBACK_ALLOWED_NETWORKS names. Refused otherwise: loopback,
  RFC 1918, 100.64/10 (carrier-grade NAT), link-local, fc00::/7 (unique local),
  documentation, benchmarking and reserved ranges, and every other non-global range;
- never, whatever the allow-list says: cloud metadata and platform addresses (169.254/16,
  168.63.129.16, fd00:ec2::254, 100.100.100.200, metadata host names), unspecified, multicast
  and broadcast addresses, IPv4-compatible `::a.b.c.d` (deprecated since RFC 4291) and
  site-local fec0::/10.

The POST connects to exactly the addresses that passed the check (shared.jobs.callback), so a
DNS answer that changes in between (DNS rebinding) cannot redirect it; the name is resolved
within the attempt's deadline.
"""

from __future__ import annotations

import ipaddress
import queue
import re
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from shared.jobs.errors import BlockedCallback, UnresolvableCallback
from shared.settings import parse_flag, setting

MAX_URL_LENGTH = 2048
#: Seconds a name may take to resolve when the caller gives no deadline (a submission).
RESOLVE_SECONDS = 5.0

BLOCKED_HOSTNAMES = frozenset({"metadata.google.internal", "metadata.goog", "metadata"})

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Never called, whatever JOB_CALLBACK_ALLOWED_NETWORKS says.
NEVER: tuple[tuple[IPNetwork, str], ...] = tuple(
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
        ("255.255.255.255/32", "broadcast"),
        ("fec0::/10", "site-local (deprecated)"),
    )
)
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_DOTTED_QUAD = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}")
#: Host names made only of numbers (decimal, octal, hex) and dots: what inet_aton reads as an
#: IPv4 address. Real DNS names always have a label with a letter (RFC 3696 section 2).
_NUMERIC_HOST = re.compile(r"(?:0x[0-9a-f]*|\d+)(?:\.(?:0x[0-9a-f]*|\d+))*\.?", re.IGNORECASE)

#: (host, port, seconds) -> every address the host resolves to.
Resolver = Callable[[str, int, float], list[str]]


@dataclass(frozen=True)
class CallbackPolicy:
    """What the deployment allows beyond public https receivers (app settings):

    JOB_CALLBACK_ALLOWED_NETWORKS  comma-separated networks (CIDR) that may be called although
                                   they are not public, e.g. a receiver in the app's virtual
                                   network ("10.20.0.0/24"); the tests and demo name loopback
    JOB_CALLBACK_ALLOW_HTTP        "true": plain http too (development only; default false)
    """

    allowed_networks: tuple[IPNetwork, ...] = ()
    allow_http: bool = False

    @classmethod
    def from_env(cls) -> CallbackPolicy:
        return cls(
            allowed_networks=parse_networks(
                setting("JOB_CALLBACK_ALLOWED_NETWORKS") or "", "JOB_CALLBACK_ALLOWED_NETWORKS"
            ),
            allow_http=parse_flag(setting("JOB_CALLBACK_ALLOW_HTTP"), "JOB_CALLBACK_ALLOW_HTTP"),
        )

    def allows(self, address: IPAddress) -> bool:
        return any(
            address.version == network.version and address in network
            for network in self.allowed_networks
        )


def parse_networks(raw: str, name: str) -> tuple[IPNetwork, ...]:
    """The networks of a comma-separated setting; `ValueError` naming the setting otherwise."""
    networks: list[IPNetwork] = []
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=True))
        except ValueError as error:
            raise ValueError(f"app setting {name}: {item!r} is not a network ({error})") from None
    return tuple(networks)


def resolve(host: str, port: int, seconds: float = RESOLVE_SECONDS) -> list[str]:
    """Every address `host` resolves to (IPv4 and IPv6), within `seconds`.

    getaddrinfo has no timeout of its own: it runs in a daemon thread that is abandoned (and
    ends on its own, within the system resolver's timeouts) when the answer is late."""
    answers: queue.SimpleQueue[list[str] | BaseException] = queue.SimpleQueue()

    def lookup() -> None:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            answers.put(list(dict.fromkeys(str(info[4][0]) for info in infos)))
        except BaseException as error:  # handed to the caller's thread
            answers.put(error)

    threading.Thread(target=lookup, daemon=True, name="callback-dns").start()
    try:
        answer = answers.get(timeout=max(seconds, 0.01))
    except queue.Empty:
        raise UnresolvableCallback(
            f"callback host {host!r} did not resolve within {seconds:.1f} s"
        ) from None
    if isinstance(answer, (socket.gaierror, UnicodeError)):
        raise UnresolvableCallback(f"callback host {host!r} does not resolve: {answer}")
    if isinstance(answer, BaseException):
        raise answer
    return answer


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


def refusal(address: str, policy: CallbackPolicy | None = None) -> str | None:
    """Why the app must not call `address`, or None if it may."""
    policy = policy or CallbackPolicy()
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return "not an IP address"
    if (
        isinstance(ip, ipaddress.IPv6Address)
        and ip in _IPV4_COMPATIBLE
        and int(ip) > 1  # :: and ::1 have reasons of their own
    ):
        return "an IPv4-compatible IPv6 address (deprecated, never called)"
    for candidate in _embedded(ip):
        for network, why in NEVER:
            if candidate.version == network.version and candidate in network:
                return why
        if candidate.is_global and not candidate.is_multicast:
            continue
        if not policy.allows(candidate):
            return f"{_kind(candidate)} (not in JOB_CALLBACK_ALLOWED_NETWORKS)"
    return None


def _kind(address: IPAddress) -> str:
    if address.is_loopback:
        return "loopback"
    if address in ipaddress.ip_network("100.64.0.0/10"):
        return "carrier-grade NAT (100.64.0.0/10)"
    if isinstance(address, ipaddress.IPv6Address) and address in ipaddress.ip_network("fc00::/7"):
        return "unique local (fc00::/7)"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return "an IPv4-mapped IPv6 address"
    return "private or reserved, not public"


def _literal(host: str) -> IPAddress | None:
    """The address a host given as an IP literal stands for; None for a DNS name;
    `BlockedCallback` for numeric spellings other than a dotted quad or IPv6."""
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            raise BlockedCallback(f"callback host {host!r} is not a valid IPv6 address") from None
    if _DOTTED_QUAD.fullmatch(host):
        return ipaddress.IPv4Address(host)
    if _NUMERIC_HOST.fullmatch(host):
        raise BlockedCallback(
            f"callback host {host!r} is a number: write an IPv4 address as a dotted quad"
        )
    return None


def check_callback_url(
    url: object,
    *,
    resolver: Resolver = resolve,
    policy: CallbackPolicy | None = None,
    seconds: float = RESOLVE_SECONDS,
) -> CallbackTarget:
    """The checked target of `url`; `BlockedCallback` saying why the app refuses it
    (`UnresolvableCallback` when the name does not resolve within `seconds`)."""
    policy = policy or CallbackPolicy()
    if not isinstance(url, str) or not url:
        raise BlockedCallback("callback_url must be a non-empty string")
    if len(url) > MAX_URL_LENGTH:
        raise BlockedCallback(f"callback_url is longer than {MAX_URL_LENGTH} characters")
    if any(ord(ch) <= 32 or ord(ch) == 127 for ch in url):
        raise BlockedCallback("callback_url contains spaces or control characters")
    if not url.isascii():
        raise BlockedCallback(
            "callback_url must be ASCII: percent-encode the path and query (RFC 3986) and "
            "write an international host name in its xn-- form"
        )
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise BlockedCallback(f"callback_url is not a valid URL: {error}") from error
    scheme = parts.scheme.lower()
    if scheme != "https" and not (scheme == "http" and policy.allow_http):
        allowed = "https:// (or http:// here)" if policy.allow_http else "https://"
        raise BlockedCallback(f"callback_url must be an {allowed} URL")
    if parts.username is not None or parts.password is not None:
        raise BlockedCallback("callback_url must not contain credentials")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise BlockedCallback("callback_url has no host")
    if host in BLOCKED_HOSTNAMES:
        raise BlockedCallback(f"callback host {host!r} is a cloud metadata service")
    port = port or (443 if scheme == "https" else 80)
    literal = _literal(host)
    addresses = [str(literal)] if literal is not None else resolver(host, port, seconds)
    if not addresses:
        raise UnresolvableCallback(f"callback host {host!r} does not resolve")
    for address in addresses:
        why = refusal(address, policy)
        if why:
            raise BlockedCallback(f"callback host {host!r} resolves to {address}: {why}")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return CallbackTarget(url, scheme, host, port, target, tuple(addresses))
