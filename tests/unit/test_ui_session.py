"""The status page's session cookie: signed, bounded in time, never the key."""

from __future__ import annotations

import time
import uuid

import pytest

from atlas_jobs._app.apikeys import generate_key, hash_key, session_token_hash
from atlas_jobs._app.ui.session import SessionCodec, new_session


def test_a_session_round_trips_and_carries_no_key() -> None:
    key = generate_key()
    codec = SessionCodec("secret-1", ttl_seconds=60)
    session = new_session("token-1")
    value = codec.encode(session)
    assert codec.decode(value) == session
    assert key not in value
    assert hash_key(key) not in value
    assert len(session.csrf_token) >= 40


def test_a_cookie_of_the_former_format_is_no_session() -> None:
    """Before server-side sessions the cookie held [key id, fingerprint, csrf]: such a
    cookie (even validly signed) names no session row and is refused."""
    codec = SessionCodec("secret-1", ttl_seconds=60)
    old = codec._serializer.dumps([str(uuid.uuid4()), "f" * 32, "c" * 43])
    assert codec.decode(old) is None


def test_a_tampered_foreign_or_malformed_cookie_is_no_session() -> None:
    codec = SessionCodec("secret-1", ttl_seconds=60)
    value = codec.encode(new_session("token-1"))
    assert codec.decode(value[:-2] + ("A" if value[-2] != "A" else "B") + value[-1]) is None
    assert SessionCodec("secret-2", ttl_seconds=60).decode(value) is None
    assert codec.decode("") is None
    assert codec.decode(None) is None
    assert codec.decode("not-a-cookie") is None


def test_a_session_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    codec = SessionCodec("secret-1", ttl_seconds=60)
    value = codec.encode(new_session("token-1"))
    now = time.time()
    monkeypatch.setattr("itsdangerous.timed.time.time", lambda: now + 59)
    assert codec.decode(value) is not None
    monkeypatch.setattr("itsdangerous.timed.time.time", lambda: now + 62)
    assert codec.decode(value) is None


def test_the_stored_token_hash_is_not_an_api_key_hash() -> None:
    token = "t" * 43
    assert session_token_hash(token) == session_token_hash(token)
    assert session_token_hash(token) != hash_key(token)
