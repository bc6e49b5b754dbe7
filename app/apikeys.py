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
from datetime import datetime, timedelta

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.db.schema import api_keys, ui_sessions
from atlas_jobs._app.roles import Role as Role

KEY_PREFIX = "atlas_"
SHOWN_PREFIX_LENGTH = len(KEY_PREFIX) + 6
API_PROCESS_CHANNEL = "atlas_job_changed"
"""The channel every API process listens on (``atlas_jobs._app.services.notifier``)."""
KEYS_REVOKED_NOTICE = "api-keys-revoked"
"""Sent there when a key is revoked: API processes then forget the keys they cached."""
"""How much of a key is kept in clear (``prefix`` column) to tell keys apart in listings."""


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller: an owner and its roles (never the key itself)."""

    key_id: uuid.UUID
    owner: str
    roles: frozenset[Role]
    holder: str | None = None
    """Who holds the key (``keys create --holder``), when it says."""
    kinds: frozenset[str] | None = None
    """The kinds an operator key may act on in bulk operations (``keys create --kinds``);
    ``None``: every kind."""

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
    holder: str | None = None


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def looks_like_key(candidate: str) -> bool:
    """Cheap shape check before touching the database."""
    return candidate.startswith(KEY_PREFIX) and 16 <= len(candidate) <= 200


HOLDER_MAX_LENGTH = 200


def normalize_holder(holder: str | None) -> str | None:
    """A holder name as stored: trimmed, 1-200 characters; ``None`` for no holder."""
    if holder is None:
        return None
    holder = holder.strip()
    if not holder or len(holder) > HOLDER_MAX_LENGTH:
        raise ValueError(f"holder must be 1-{HOLDER_MAX_LENGTH} characters")
    return holder


async def create_key(
    conn: AsyncConnection,
    *,
    owner: str,
    roles: Iterable[Role],
    holder: str | None = None,
    kinds: Iterable[str] | None = None,
) -> str:
    """Store a new key for ``owner`` (held by ``holder``, when named; acting in bulk on
    ``kinds`` only, when given) and return it in clear -- the only time it exists."""
    role_list = sorted({Role(r).value for r in roles})
    if not owner.strip():
        raise ValueError("owner must not be empty")
    if not role_list:
        raise ValueError("a key needs at least one role")
    holder = normalize_holder(holder)
    key = generate_key()
    await conn.execute(
        insert(api_keys).values(
            key_hash=hash_key(key),
            prefix=key[:SHOWN_PREFIX_LENGTH],
            owner=owner,
            roles=role_list,
            holder=holder,
            kinds=None if kinds is None else sorted(set(kinds)),
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
            select(
                api_keys.c.id,
                api_keys.c.key_hash,
                api_keys.c.owner,
                api_keys.c.roles,
                api_keys.c.holder,
                api_keys.c.kinds,
            ).where(api_keys.c.key_hash == digest, api_keys.c.revoked_at.is_(None))
        )
    ).first()
    # The lookup is by hash (an index probe); the constant-time compare is belt and braces.
    if row is None or not hmac.compare_digest(row.key_hash, digest):
        return None
    return Principal(
        row.id,
        row.owner,
        frozenset(Role(r) for r in row.roles),
        row.holder,
        None if row.kinds is None else frozenset(row.kinds),
    )


SESSION_TOKEN_PREFIX = b"atlas-jobs.ui-session.v2:"


def session_token_hash(token: str) -> str:
    """What ``ui_sessions`` stores of a session's token (never the token itself)."""
    return hashlib.sha256(SESSION_TOKEN_PREFIX + token.encode("utf-8")).hexdigest()


async def open_session(conn: AsyncConnection, key_id: uuid.UUID, *, ttl_seconds: int) -> str:
    """A new status-page session of key ``key_id``, lasting ``ttl_seconds``: its random
    token (which the signed cookie carries), stored only as a hash. The key's expired
    sessions are removed on the way (the table holds live logins, and the dead ones of
    keys that never log in again until their next login)."""
    token = secrets.token_urlsafe(32)
    await conn.execute(
        delete(ui_sessions).where(
            ui_sessions.c.key_id == key_id, ui_sessions.c.expires_at <= func.now()
        )
    )
    await conn.execute(
        insert(ui_sessions).values(
            token_hash=session_token_hash(token),
            key_id=key_id,
            expires_at=func.now() + timedelta(seconds=ttl_seconds),
        )
    )
    return token


async def authenticate_session(conn: AsyncConnection, token: str) -> Principal | None:
    """The principal of a live session: its row exists (not logged out, not ended by an
    operator or by the key's revocation), has not expired, and its key is not revoked.
    ONE statement: the session's primary-key probe joined to its key's."""
    row = (
        await conn.execute(
            select(
                api_keys.c.id,
                api_keys.c.owner,
                api_keys.c.roles,
                api_keys.c.holder,
                api_keys.c.kinds,
            )
            .select_from(ui_sessions.join(api_keys, api_keys.c.id == ui_sessions.c.key_id))
            .where(
                ui_sessions.c.token_hash == session_token_hash(token),
                ui_sessions.c.expires_at > func.now(),
                api_keys.c.revoked_at.is_(None),
            )
        )
    ).first()
    if row is None:
        return None
    return Principal(
        row.id,
        row.owner,
        frozenset(Role(r) for r in row.roles),
        row.holder,
        None if row.kinds is None else frozenset(row.kinds),
    )


async def end_session(conn: AsyncConnection, token: str) -> bool:
    """Log one session out (its cookie answers nothing from now on)."""
    done = await conn.execute(
        delete(ui_sessions)
        .where(ui_sessions.c.token_hash == session_token_hash(token))
        .returning(ui_sessions.c.key_id)
    )
    return done.first() is not None


async def end_sessions(
    conn: AsyncConnection, *, owner: str | None = None, key_id: uuid.UUID | None = None
) -> int:
    """Log out everywhere: every session of key ``key_id``, or of every key of
    ``owner``, or (neither given) every session there is. How many were ended."""
    query = delete(ui_sessions)
    if key_id is not None:
        query = query.where(ui_sessions.c.key_id == key_id)
    if owner is not None:
        query = query.where(
            ui_sessions.c.key_id.in_(select(api_keys.c.id).where(api_keys.c.owner == owner))
        )
    done = await conn.execute(query.returning(ui_sessions.c.key_id))
    return len(done.all())


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
            row.holder,
        )
        for row in (await conn.execute(query)).all()
    ]


async def revoke_key(conn: AsyncConnection, key_id: uuid.UUID) -> bool:
    """Revoke the key and end its status-page sessions; at commit every listening API
    process drops its cached lookups (``atlas_jobs._app.api.keycache``; without the notice the
    cache's TTL still bounds the delay -- sessions are never cached)."""
    done = await conn.execute(
        update(api_keys)
        .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
        .values(revoked_at=func.now())
        .returning(api_keys.c.id)
    )
    if done.first() is None:
        return False
    await end_sessions(conn, key_id=key_id)
    await conn.execute(select(func.pg_notify(API_PROCESS_CHANNEL, KEYS_REVOKED_NOTICE)))
    return True
