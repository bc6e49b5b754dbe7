"""The status page's sessions: logging in with an API key, finding who a session is,
logging out, and an operator's "log out everywhere".

A session is a server-side row (its token's hash) tied to an API key; the page's cookie
carries the token. Routes and console commands come here rather than to
:mod:`atlas_jobs._app.apikeys`, so where a session starts and ends is decided in one place.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.apikeys import (
    Principal,
    authenticate,
    authenticate_session,
    end_session,
    end_sessions,
    open_session,
)
from atlas_jobs._app.db.engine import Connects


@dataclass(frozen=True, slots=True)
class LoggedIn:
    """A session opened for ``principal``: ``token`` goes into the page's cookie."""

    principal: Principal
    token: str


async def log_in(
    reads: Connects, engine: AsyncEngine, api_key: str, *, ttl_seconds: int
) -> LoggedIn | None:
    """Open a session for an active API key (``None``: no key given, or an unknown or
    revoked one -- nothing is written). The key is checked on the read pool, the session
    row written on the primary."""
    key = api_key.strip()
    if not key:
        return None
    async with reads.connect() as conn:
        principal = await authenticate(conn, key)
    if principal is None:
        return None
    async with engine.begin() as conn:
        token = await open_session(conn, principal.key_id, ttl_seconds=ttl_seconds)
    return LoggedIn(principal, token)


async def session_principal(reads: Connects, token: str) -> Principal | None:
    """Who a session token acts for, checked on every request (one statement, like the
    API's key check): ``None`` once it was logged out, expired, or its key revoked."""
    async with reads.connect() as conn:
        return await authenticate_session(conn, token)


async def log_out(engine: AsyncEngine, token: str) -> bool:
    """End one session: its cookie answers nothing from now on (whether it was open)."""
    async with engine.begin() as conn:
        return await end_session(conn, token)


async def end_all(
    engine: AsyncEngine, *, owner: str | None = None, key_id: uuid.UUID | None = None
) -> int:
    """Log out everywhere: every session of key ``key_id``, of every key of ``owner``
    (both: that key's only if it is that owner's), or of every key (neither). The keys
    stay valid. How many sessions ended."""
    async with engine.begin() as conn:
        return await end_sessions(conn, owner=owner, key_id=key_id)
