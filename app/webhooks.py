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

import base64
import ipaddress
import random
import secrets
import socket
from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum
from urllib.parse import urlsplit

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


def _allowed(host: str, allowed_hosts: Iterable[str]) -> bool:
    host = host.lower().rstrip(".")
    for pattern in allowed_hosts:
        pattern = pattern.lower().rstrip(".")
        if host == pattern or (pattern.startswith("*.") and host.endswith(pattern[1:])):
            return True
    return False


def _internal(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


def check_url(
    url: str,
    *,
    allowed_hosts: Iterable[str] = (),
    internal_hosts: Iterable[str] = (),
    resolve: bool = True,
) -> str:
    """``url`` if the service may call it, else :class:`UnsafeUrlError`.

    http(s) only, no credentials in the URL. When ``allowed_hosts`` is not empty, the host
    must match one of them (``hooks.example.com`` or ``*.example.com``). Whatever the
    allow-list, a host that is or resolves to a loopback, link-local (cloud metadata at
    169.254.169.254), private, or otherwise non-global address is refused unless it is
    listed in ``internal_hosts`` -- no SSRF into the service's own network by default.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise UnsafeUrlError("Only http and https URLs")
    if parts.username or parts.password:
        raise UnsafeUrlError("No credentials in the URL; authenticate with the signature")
    host = parts.hostname
    if not host:
        raise UnsafeUrlError("The URL has no host")
    allowed = list(allowed_hosts)
    if allowed and not _allowed(host, allowed):
        raise UnsafeUrlError(f"Host {host!r} is not in ATLAS_WEBHOOK_ALLOWED_HOSTS")
    if _allowed(host, internal_hosts):
        return url
    try:
        addresses = [str(ipaddress.ip_address(host))]
    except ValueError:
        if not resolve:
            return url
        try:
            found = socket.getaddrinfo(host, parts.port or 443, proto=socket.IPPROTO_TCP)
        except OSError:
            raise UnsafeUrlError(f"Host {host!r} does not resolve") from None
        addresses = [str(info[4][0]) for info in found]
    if any(_internal(address) for address in addresses):
        raise UnsafeUrlError(
            f"Host {host!r} is an internal address; allow it with ATLAS_WEBHOOK_INTERNAL_HOSTS"
        )
    return url
