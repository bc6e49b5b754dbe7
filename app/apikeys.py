"""API keys: generated once, shown once, stored only as a SHA-256 hash.

A key is 32 random bytes (URL-safe base64) behind a fixed ``atlas_`` prefix, so a
leaked key is recognizable by secret scanners. The keys are high-entropy, so a plain
SHA-256 is enough to make the stored hash useless to a reader of the database (a slow
password hash protects *low*-entropy secrets; it would only slow down every request).
Each key carries an owner (whose jobs it sees) and roles (what else it may do).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.db.schema import api_keys

KEY_PREFIX = "atlas_"
SHOWN_PREFIX_LENGTH = len(KEY_PREFIX) + 6
API_PROCESS_CHANNEL = "atlas_job_changed"
"""The channel every API process listens on (``atlas_jobs._app.api.notifier``)."""
KEYS_REVOKED_NOTICE = "api-keys-revoked"
"""Sent there when a key is revoked: API processes then forget the keys they cached."""
"""How much of a key is kept in clear (``prefix`` column) to tell keys apart in listings."""


class Role(StrEnum):
    """What a key may do beyond acting on its owner's own jobs."""

    CLIENT = "client"
    REVIEWER = "reviewer"
    OPERATOR = "operator"


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller: an owner and its roles (never the key itself)."""

    key_id: uuid.UUID
    owner: str
    roles: frozenset[Role]

    def has(self, role: Role) -> bool:
        return role in self.roles


@dataclass(frozen=True, slots=True)
class KeyListing:
    id: uuid.UUID
    prefix: str
    owner: str
    roles: tuple[Role, ...]
    created_at: datetime
    revoked_at: datetime | None


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def looks_like_key(candidate: str) -> bool:
    """Cheap shape check before touching the database."""
    return candidate.startswith(KEY_PREFIX) and 16 <= len(candidate) <= 200


async def create_key(conn: AsyncConnection, *, owner: str, roles: Iterable[Role]) -> str:
    """Store a new key for ``owner`` and return it in clear -- the only time it exists."""
    role_list = sorted({Role(r).value for r in roles})
    if not owner.strip():
        raise ValueError("owner must not be empty")
    if not role_list:
        raise ValueError("a key needs at least one role")
    key = generate_key()
    await conn.execute(
        insert(api_keys).values(
            key_hash=hash_key(key),
            prefix=key[:SHOWN_PREFIX_LENGTH],
            owner=owner,
            roles=role_list,
        )
    )
    return key


async def authenticate(conn: AsyncConnection, key: str) -> Principal | None:
    """The principal behind ``key``, or ``None`` for an unknown or revoked key."""
    if not looks_like_key(key):
        return None
    digest = hash_key(key)
    row = (
        await conn.execute(
            select(api_keys.c.id, api_keys.c.key_hash, api_keys.c.owner, api_keys.c.roles).where(
                api_keys.c.key_hash == digest, api_keys.c.revoked_at.is_(None)
            )
        )
    ).first()
    # The lookup is by hash (an index probe); the constant-time compare is belt and braces.
    if row is None or not hmac.compare_digest(row.key_hash, digest):
        return None
    return Principal(row.id, row.owner, frozenset(Role(r) for r in row.roles))


def key_fingerprint(key_hash: str) -> str:
    """A short digest of a key's stored hash: what a browser session carries to prove
    which key it was opened with (never the key, nor the hash itself)."""
    return hashlib.sha256(b"atlas-jobs.session.v1:" + key_hash.encode("ascii")).hexdigest()[:32]


async def authenticate_with_fingerprint(
    conn: AsyncConnection, key_id: uuid.UUID, fingerprint: str
) -> Principal | None:
    """The principal of key ``key_id`` while it is not revoked and its stored hash still
    has ``fingerprint`` (a browser session re-checks this on every request: revoking
    the key ends the session)."""
    row = (
        await conn.execute(
            select(api_keys.c.id, api_keys.c.key_hash, api_keys.c.owner, api_keys.c.roles).where(
                api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None)
            )
        )
    ).first()
    if row is None or not hmac.compare_digest(key_fingerprint(row.key_hash), fingerprint):
        return None
    return Principal(row.id, row.owner, frozenset(Role(r) for r in row.roles))


async def list_keys(conn: AsyncConnection, *, owner: str | None = None) -> Sequence[KeyListing]:
    query = select(api_keys).order_by(api_keys.c.created_at)
    if owner is not None:
        query = query.where(api_keys.c.owner == owner)
    return [
        KeyListing(
            row.id,
            row.prefix,
            row.owner,
            tuple(Role(r) for r in row.roles),
            row.created_at,
            row.revoked_at,
        )
        for row in (await conn.execute(query)).all()
    ]


async def revoke_key(conn: AsyncConnection, key_id: uuid.UUID) -> bool:
    """Revoke the key; at commit every listening API process drops its cached lookups
    (``atlas_jobs._app.api.keycache``; without the notice the cache's TTL still bounds the delay)."""
    done = await conn.execute(
        update(api_keys)
        .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
        .values(revoked_at=func.now())
        .returning(api_keys.c.id)
    )
    if done.first() is None:
        return False
    await conn.execute(select(func.pg_notify(API_PROCESS_CHANNEL, KEYS_REVOKED_NOTICE)))
    return True
