"""The rules of :mod:`atlas_jobs._app.webhooks`: which URLs may be called, signatures, backoff."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from atlas_jobs._app.webhooks import (
    Resolver,
    UnsafeUrlError,
    address_refusal,
    backoff_seconds,
    check_url,
    check_url_form,
    new_secret,
    sign,
)

EMBEDDED_INTERNAL_V4 = [
    "http://[::7f00:1]/",  # IPv4-compatible 127.0.0.1
    "http://[::127.0.0.1]/",
    "http://[64:ff9b::7f00:1]/",  # NAT64 of 127.0.0.1
    "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 of 169.254.169.254
    "http://[2002:7f00:1::]/",  # 6to4 of 127.0.0.1
    "http://[::ffff:0:7f00:1]/",  # SIIT of 127.0.0.1
    "http://[::ffff:a9fe:a9fe]/",  # IPv4-mapped metadata address
    "http://[2001:0:5db8:d822::80ff:fefe]/",  # Teredo, client NOT(80ff:fefe) = 127.0.1.1
    "http://[2001:0:a00:1::5db8:d822]/",  # Teredo, server 10.0.0.1
    "http://[64:ff9b:1::5db8:d822]/",  # local-use NAT64: refused whatever it carries
]
"""The probe's IPv6 forms that embed an internal IPv4 address (and their cousins)."""


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/hook",
        "http://localhost/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://10.0.0.7/hook",
        "http://192.168.1.1/hook",
        "http://0.0.0.0/hook",
        "ftp://example.com/hook",
        "http://user:pw@example.com/hook",
        "file:///etc/passwd",
        "http:///nohost",
    ],
)
async def test_internal_addresses_and_odd_urls_are_refused(url: str) -> None:
    with pytest.raises(UnsafeUrlError):
        await check_url(url)


@pytest.mark.parametrize("url", EMBEDDED_INTERNAL_V4)
async def test_ipv6_forms_that_embed_an_internal_ipv4_are_refused(url: str) -> None:
    with pytest.raises(UnsafeUrlError, match="internal address"):
        await check_url(url)


@pytest.mark.parametrize(
    "address",
    [
        "0.1.2.3",
        "100.64.0.1",  # CGNAT
        "100.127.255.254",
        "198.18.0.1",  # benchmarking
        "198.19.255.255",
        "192.0.0.8",
        "192.0.2.1",  # documentation
        "198.51.100.7",
        "203.0.113.9",
        "192.88.99.1",
        "224.0.0.1",
        "239.255.255.250",
        "240.0.0.1",
        "255.255.255.255",
        "172.31.255.255",
        "::",
        "::1",
        "100::1",  # discard
        "2001:2::1",  # benchmarking
        "2001:db8::1",
        "3fff::1",
        "fc00::1",
        "fd12:3456::1",
        "fe80::1",
        "fe80::1%eth0",
        "fec0::1",
        "ff02::1",
        "5f00::1",
        "::ffff:10.0.0.1",
        "64:ff9b::c0a8:101",  # NAT64 of 192.168.1.1
        "2002:c0a8:101::1",  # 6to4 of 192.168.1.1
        "2002:6440:1::",  # 6to4 of CGNAT
    ],
)
def test_every_special_purpose_address_is_refused(address: str) -> None:
    assert address_refusal(address) is not None


@pytest.mark.parametrize(
    "address",
    [
        "93.184.216.34",
        "1.1.1.1",
        "2606:4700:4700::1111",
        "2a00:1450:4001:80b::200e",
        "::ffff:93.184.216.34",  # mapped public
        "64:ff9b::5db8:d822",  # NAT64 of a public address
        "2002:5db8:d822::1",  # 6to4 of a public address
    ],
)
def test_public_addresses_in_every_form_are_allowed(address: str) -> None:
    assert address_refusal(address) is None


async def test_a_public_address_is_allowed_and_internal_ones_only_when_configured() -> None:
    target = await check_url("https://93.184.216.34/hook")
    assert (target.url, target.host, target.port) == (
        "https://93.184.216.34/hook",
        "93.184.216.34",
        443,
    )
    assert target.addresses == ("93.184.216.34",)
    local = await check_url("http://127.0.0.1:9/h", internal_hosts=["127.0.0.1"])
    assert local.addresses == ("127.0.0.1",)
    with pytest.raises(UnsafeUrlError):
        await check_url("http://169.254.169.254/", internal_hosts=["127.0.0.1"])


def resolver(*addresses: str) -> tuple[list[str], Resolver]:
    asked: list[str] = []

    async def resolve(host: str, port: int) -> Sequence[str]:
        asked.append(f"{host}:{port}")
        return list(addresses)

    return asked, resolve


async def test_a_name_resolving_to_public_and_internal_addresses_is_refused() -> None:
    for internal in ("127.0.0.1", "::ffff:169.254.169.254", "64:ff9b::a00:1", "fd00::1"):
        asked, resolve = resolver("93.184.216.34", internal, "2606:4700::1111")
        with pytest.raises(UnsafeUrlError, match="internal address"):
            await check_url("https://hooks.example.com/x", resolve=resolve)
        assert asked == ["hooks.example.com:443"]
    asked, resolve = resolver("93.184.216.34", "2606:4700::1111")
    target = await check_url("http://hooks.example.com:8080/x", resolve=resolve)
    assert target.addresses == ("93.184.216.34", "2606:4700::1111")
    assert (target.host, target.port) == ("hooks.example.com", 8080)


async def test_resolution_runs_off_the_event_loop_and_is_bounded() -> None:
    async def slow(host: str, port: int) -> Sequence[str]:
        await asyncio.sleep(5)
        return ["93.184.216.34"]

    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    beat = asyncio.create_task(ticker())
    started = time.monotonic()
    with pytest.raises(UnsafeUrlError, match="does not resolve"):
        await check_url("https://slow.example/x", resolve=slow, resolve_within=0.2)
    beat.cancel()
    assert time.monotonic() - started < 2
    assert ticks >= 5  # the loop kept running while the name was being resolved
    # and the system resolver is the loop's executor, not a blocking call on the loop:
    target = await check_url("http://localhost/x", internal_hosts=["localhost"])
    assert set(target.addresses) <= {"127.0.0.1", "::1"}


def test_an_allow_list_restricts_hosts() -> None:
    allowed = ["hooks.example.com", "*.partner.test"]
    check_url_form("https://hooks.example.com/x", allowed_hosts=allowed)
    check_url_form("https://a.b.partner.test/x", allowed_hosts=allowed)
    for url in ("https://evil.example.com/x", "https://partner.test.evil.com/x"):
        with pytest.raises(UnsafeUrlError):
            check_url_form(url, allowed_hosts=allowed)


def test_the_signature_verifies_with_the_secret_and_only_with_it() -> None:
    secret = new_secret()
    assert secret.startswith("whsec_")
    body = json.dumps({"id": "j", "state": "succeeded"})
    now = datetime.now(UTC)
    headers = {
        "webhook-id": "d1",
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": sign(secret, "d1", now, body),
    }
    assert Webhook(secret).verify(body, headers) == {"id": "j", "state": "succeeded"}
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body.replace("succeeded", "failed"), headers)


def test_backoff_grows_and_is_capped() -> None:
    for attempts in range(1, 30):
        delay = backoff_seconds(attempts, base=2, cap=600)
        assert 0 <= delay <= min(600, 2 * 2 ** (attempts - 1))
