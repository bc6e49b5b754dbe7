"""The rules of :mod:`atlas_jobs._app.webhooks`: which URLs may be called, signatures, backoff."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from atlas_jobs._app.webhooks import UnsafeUrlError, backoff_seconds, check_url, new_secret, sign


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
def test_internal_addresses_and_odd_urls_are_refused(url: str) -> None:
    with pytest.raises(UnsafeUrlError):
        check_url(url)


def test_a_public_address_is_allowed_and_internal_ones_only_when_configured() -> None:
    assert check_url("https://93.184.216.34/hook") == "https://93.184.216.34/hook"
    assert check_url("http://127.0.0.1:9/h", internal_hosts=["127.0.0.1"]) == "http://127.0.0.1:9/h"
    with pytest.raises(UnsafeUrlError):
        check_url("http://169.254.169.254/", internal_hosts=["127.0.0.1"])


def test_an_allow_list_restricts_hosts() -> None:
    allowed = ["hooks.example.com", "*.partner.test"]
    check_url("https://hooks.example.com/x", allowed_hosts=allowed, resolve=False)
    check_url("https://a.b.partner.test/x", allowed_hosts=allowed, resolve=False)
    for url in ("https://evil.example.com/x", "https://partner.test.evil.com/x"):
        with pytest.raises(UnsafeUrlError):
            check_url(url, allowed_hosts=allowed, resolve=False)


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
