"""Completion callbacks: which events are sent, how an endpoint is checked, how a
delivery is signed and retried -- the rules, in one place.

A job created with ``notify`` (an id of one of its owner's registered endpoints) gets a
delivery row for each of these events, written by a database trigger in the same
transaction as the transition that causes it (an outbox: no event without its
transition, no transition without its event). Worker processes send them
(:mod:`atlas_jobs._workers.webhook_sender`): body = the job's status representation, headers per
Standard Webhooks (``webhook-id`` = the delivery's id, the same on every retry;
``webhook-timestamp``; ``webhook-signature`` = ``v1,`` + HMAC-SHA256 over
``id.timestamp.body`` with the endpoint's secret), retried with exponential backoff up to
``ATLAS_WEBHOOK_MAX_ATTEMPTS``, then ``failed`` -- visibly, and without touching the job.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import random
import secrets
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from urllib.parse import urlsplit

import httpx
from standardwebhooks import Webhook

from atlas_jobs._app.lifecycle import TERMINAL_STATES, JobState

WEBHOOK_EVENTS = frozenset(
    {f"job.{state.value}" for state in (*TERMINAL_STATES, JobState.UNRESOLVED)}
    | {"job.result_expired"}
)
"""``job.<state>`` when a job reaches a terminal state or ``unresolved`` (an owner must
act), and ``job.result_expired`` when its result's retention ends."""


class DeliveryAttemptState(StrEnum):
    PENDING = "pending"
    """Waiting for its next attempt (``next_attempt_at``)."""
    SENDING = "sending"
    """A worker holds it until ``lease_expires_at``; a worker that died lets it expire
    and another sends it again, with the same ``webhook-id``."""
    DELIVERED = "delivered"
    """The endpoint answered 2xx."""
    FAILED = "failed"
    """Every attempt failed; the job is unaffected."""


def new_secret() -> str:
    """A signing secret as Standard Webhooks shows it: ``whsec_`` + base64 of 32 bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def sign(secret: str, delivery_id: str, sent_at: datetime, body: str) -> str:
    """The ``webhook-signature`` header for one attempt."""
    return Webhook(secret).sign(delivery_id, sent_at, body)


def backoff_seconds(attempts: int, *, base: float, cap: float) -> float:
    """Full-jitter exponential backoff before attempt ``attempts + 1``."""
    return random.uniform(0, min(cap, base * 2 ** max(attempts - 1, 0)))  # noqa: S311  # nosec B311


class UnsafeUrlError(ValueError):
    """A webhook URL the service refuses to call (scheme, host, or where it resolves)."""


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _nets(
    *pairs: tuple[str, str],
) -> tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str], ...]:
    return tuple((ipaddress.ip_network(net), why) for net, why in pairs)


# The IANA IPv4 Special-Purpose Address Registry, every entry (reachable or not: none of
# them is a webhook receiver), plus multicast and the reserved 240/4.
_V4_REFUSED = _nets(
    ("0.0.0.0/8", "'this network'"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "shared address space (CGNAT)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local (cloud metadata)"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.0.2.0/24", "documentation"),
    ("192.31.196.0/24", "AS112"),
    ("192.52.193.0/24", "AMT"),
    ("192.88.99.0/24", "deprecated 6to4 relay anycast"),
    ("192.168.0.0/16", "private"),
    ("192.175.48.0/24", "AS112 direct delegation"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
    ("255.255.255.255/32", "limited broadcast"),
)

# IPv6 forms that carry an IPv4 address: the decision is the embedded address's.
_MAPPED = ipaddress.ip_network("::ffff:0:0/96")  # IPv4-mapped
_SIIT = ipaddress.ip_network("::ffff:0:0:0/96")  # IPv4-translated (SIIT, RFC 2765)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # NAT64 well-known prefix (RFC 6052)
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")  # 6to4: bits 16-47
_TEREDO = ipaddress.ip_network("2001::/32")  # server in bits 32-63, client NOT-ed last 32
_GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")

# The IANA IPv6 Special-Purpose Address Registry: refused outright. Everything outside
# 2000::/3 (ULA fc00::/7, link-local fe80::/10, multicast ff00::/8, the unspecified and
# loopback addresses, discard 100::/64, ...) is refused as "not global unicast".
_V6_REFUSED = _nets(
    ("::1/128", "loopback"),
    ("::/128", "unspecified"),
    ("::/96", "IPv4-compatible (deprecated)"),
    ("64:ff9b:1::/48", "local-use NAT64"),
    ("100::/64", "discard-only"),
    ("100:0:0:1::/64", "dummy prefix"),
    ("2001::/23", "IETF protocol assignments"),
    ("2001:db8::/32", "documentation"),
    ("2620:4f:8000::/48", "AS112 direct delegation"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "SRv6 SIDs"),
    ("fc00::/7", "unique local"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local (deprecated)"),
    ("ff00::/8", "multicast"),
)


def _embedded_v4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address] | None:
    """The IPv4 addresses an IPv6 address stands for (translation and tunnel forms), or
    ``None`` when it is a plain IPv6 address."""
    low32 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _MAPPED or ip in _SIIT or ip in _NAT64:
        return [low32]
    if ip in _SIX_TO_FOUR:
        return [ipaddress.IPv4Address((int(ip) >> 80) & 0xFFFFFFFF)]
    if ip in _TEREDO:
        server = ipaddress.IPv4Address((int(ip) >> 64) & 0xFFFFFFFF)
        client = ipaddress.IPv4Address(~int(ip) & 0xFFFFFFFF)
        return [server, client]
    return None


def address_refusal(address: str | IPAddress) -> str | None:
    """THE allow/deny rule for a webhook's destination address: why the service never
    connects to ``address`` (a loopback, private, link-local, CGNAT, documentation,
    benchmarking, multicast, reserved or otherwise special-purpose address, in IPv4 or
    in any IPv6 form that embeds one), or ``None`` when it may.

    An IPv6 address that carries an IPv4 one (IPv4-mapped ``::ffff:a.b.c.d``, SIIT
    ``::ffff:0:a.b.c.d``, NAT64 ``64:ff9b::a.b.c.d``, 6to4 ``2002:AABB:CCDD::``, Teredo
    ``2001:0:<server>::<NOT client>``) is decided on the IPv4 address(es) it carries;
    IPv4-compatible ``::a.b.c.d`` (deprecated) and local-use NAT64 ``64:ff9b:1::/48``
    are refused whatever they carry. ``ipaddress.is_global`` alone is not trusted: on
    Python 3.11 it is true for several of these forms.
    """
    ip = ipaddress.ip_address(address) if isinstance(address, str) else address
    if isinstance(ip, ipaddress.IPv6Address):
        ip = ip if ip.scope_id is None else ipaddress.IPv6Address(str(ip).split("%", 1)[0])
        embedded = _embedded_v4(ip)
        if embedded is not None:
            for v4 in embedded:
                why = address_refusal(v4)
                if why is not None:
                    return f"{ip} embeds {v4}: {why}"
            return None
        for net, why in _V6_REFUSED:
            if ip in net:
                return f"{ip} is {why}"
        if ip not in _GLOBAL_UNICAST or not ip.is_global:
            return f"{ip} is not a global unicast address"
        return None
    for net, why in _V4_REFUSED:
        if ip in net:
            return f"{ip} is {why}"
    if not ip.is_global or ip.is_multicast:
        return f"{ip} is not a global address"
    return None


Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""Names -> addresses (``host``, ``port`` -> IP strings): :func:`system_resolve`, or a
test's own."""

RESOLVE_TIMEOUT_SECONDS = 5.0


async def system_resolve(host: str, port: int) -> Sequence[str]:
    """The system resolver, off the event loop (``loop.getaddrinfo`` runs it in the
    default executor: a slow DNS server stalls this call, never the other requests)."""
    loop = asyncio.get_running_loop()
    found = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return list(dict.fromkeys(str(info[4][0]) for info in found))


@dataclass(frozen=True, slots=True)
class Target:
    """A webhook URL as checked: the connection goes to ``addresses`` only (the ones
    :func:`address_refusal` passed), never to a second resolution of ``host``."""

    url: str
    host: str
    """As the connection names it: IDNA-encoded, an IPv6 literal without brackets."""
    port: int
    addresses: tuple[str, ...]


def _allowed(host: str, allowed_hosts: Iterable[str]) -> bool:
    host = host.lower().rstrip(".")
    for pattern in allowed_hosts:
        pattern = pattern.lower().rstrip(".")
        if host == pattern or (pattern.startswith("*.") and host.endswith(pattern[1:])):
            return True
    return False


def check_url_form(url: str, *, allowed_hosts: Iterable[str] = ()) -> tuple[str, int]:
    """The URL's ``(host, port)`` if its form is acceptable, else :class:`UnsafeUrlError`.

    http(s) only, no credentials in the URL, a host; when ``allowed_hosts`` is not
    empty, the host must match one of them (``hooks.example.com`` or ``*.example.com``).
    Nothing is resolved here (see :func:`check_url`)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise UnsafeUrlError("Only http and https URLs")
    if parts.username or parts.password:
        raise UnsafeUrlError("No credentials in the URL; authenticate with the signature")
    try:
        parsed = httpx.URL(url)
        port = parsed.port or (443 if parts.scheme == "https" else 80)
        host = parsed.raw_host.decode("ascii")
    except (httpx.InvalidURL, ValueError, UnicodeError):
        raise UnsafeUrlError("The URL is malformed") from None
    if not host:
        raise UnsafeUrlError("The URL has no host")
    allowed = list(allowed_hosts)
    if allowed and not _allowed(host, allowed):
        raise UnsafeUrlError(f"Host {host!r} is not in ATLAS_WEBHOOK_ALLOWED_HOSTS")
    return host, port


async def check_url(
    url: str,
    *,
    allowed_hosts: Iterable[str] = (),
    internal_hosts: Iterable[str] = (),
    resolve: Resolver = system_resolve,
    resolve_within: float = RESOLVE_TIMEOUT_SECONDS,
) -> Target:
    """The :class:`Target` to connect to for ``url``, else :class:`UnsafeUrlError`.

    The form is :func:`check_url_form`'s. The host is resolved once (off the event loop,
    within ``resolve_within`` seconds), and EVERY address it resolves to must pass
    :func:`address_refusal` -- one internal address among public ones refuses the URL
    -- unless the host is listed in ``internal_hosts`` (e.g. a receiver on 127.0.0.1 in
    development). The caller connects to the returned addresses only.
    """
    host, port = check_url_form(url, allowed_hosts=allowed_hosts)
    try:
        addresses: Sequence[str] = [str(ipaddress.ip_address(host))]
    except ValueError:
        try:
            addresses = await asyncio.wait_for(resolve(host, port), resolve_within)
        except (OSError, TimeoutError, UnicodeError):
            raise UnsafeUrlError(f"Host {host!r} does not resolve") from None
    if not addresses:
        raise UnsafeUrlError(f"Host {host!r} does not resolve")
    if not _allowed(host, internal_hosts):
        for address in addresses:
            why = address_refusal(address)
            if why is not None:
                raise UnsafeUrlError(
                    f"Host {host!r} resolves to an internal address ({why}); allow it with "
                    "ATLAS_WEBHOOK_INTERNAL_HOSTS"
                )
    return Target(url, host, port, tuple(addresses))
