"""The status page's session cookie: signed, bounded in time, never the key."""

from __future__ import annotations

import time
import uuid

import pytest

from atlas_jobs._app.apikeys import generate_key, hash_key, key_fingerprint
from atlas_jobs._app.ui.session import SessionCodec, new_session


def test_a_session_round_trips_and_carries_no_key() -> None:
    key = generate_key()
    codec = SessionCodec("secret-1", ttl_seconds=60)
    session = new_session(uuid.uuid4(), key_fingerprint(hash_key(key)))
    value = codec.encode(session)
    assert codec.decode(value) == session
    assert key not in value
    assert hash_key(key) not in value
    assert len(session.csrf_token) >= 40


def test_a_tampered_foreign_or_malformed_cookie_is_no_session() -> None:
    codec = SessionCodec("secret-1", ttl_seconds=60)
    value = codec.encode(new_session(uuid.uuid4(), "f" * 32))
    assert codec.decode(value[:-2] + ("A" if value[-2] != "A" else "B") + value[-1]) is None
    assert SessionCodec("secret-2", ttl_seconds=60).decode(value) is None
    assert codec.decode("") is None
    assert codec.decode(None) is None
    assert codec.decode("not-a-cookie") is None


def test_a_session_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    codec = SessionCodec("secret-1", ttl_seconds=60)
    value = codec.encode(new_session(uuid.uuid4(), "f" * 32))
    now = time.time()
    monkeypatch.setattr("itsdangerous.timed.time.time", lambda: now + 59)
    assert codec.decode(value) is not None
    monkeypatch.setattr("itsdangerous.timed.time.time", lambda: now + 62)
    assert codec.decode(value) is None


def test_the_fingerprint_follows_the_stored_hash() -> None:
    one, other = generate_key(), generate_key()
    assert key_fingerprint(hash_key(one)) == key_fingerprint(hash_key(one))
    assert key_fingerprint(hash_key(one)) != key_fingerprint(hash_key(other))
    assert key_fingerprint(hash_key(one)) not in hash_key(one)
