"""Operators' scheduling settings: per-owner shares and per-key limits and start rates.

Each change is ONE statement that writes the setting and its ``scheduling_changes`` row
(who, when, before and after) together, after the setting's row lock. The claim reads
``owner_shares`` and ``concurrency_keys`` on every execution, so a change holds from the
next claim on: no restart, no cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, text
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.db.queries import KEY_RUNNING

# set_share: the owner's share, and the change recorded with its actor and the share
# before (NULL: the default).
_SET_SHARE = text("""
WITH before AS (
    SELECT share FROM owner_shares WHERE owner = CAST(:owner AS text)
), written AS (
    INSERT INTO owner_shares (owner, share, updated_by, updated_at)
    VALUES (CAST(:owner AS text), CAST(:share AS integer), CAST(:actor AS text), now())
    ON CONFLICT (owner) DO UPDATE
       SET share = EXCLUDED.share, updated_by = EXCLUDED.updated_by, updated_at = now()
    RETURNING owner, share, updated_by, updated_at
), recorded AS (
    INSERT INTO scheduling_changes (actor, setting, subject, before, after, note)
    SELECT CAST(:actor AS text), 'owner_share', CAST(:owner AS text),
           (SELECT jsonb_build_object('share', share) FROM before),
           jsonb_build_object('share', CAST(:share AS integer)), CAST(:note AS text)
)
SELECT * FROM written
""")

_KEY_COLUMNS = (
    "key, declared_limit, declared_rate, declared_period_seconds, max_running,"
    f" {KEY_RUNNING} AS running, rate, period_seconds, updated_by, updated_at"
)

# set_key: an operator's limit and start rate for a key (NULL: the declared limit / the
# declared rate, none if its kind declared none), whether or not a job has named the key
# yet; the change recorded with its actor. A rate put in force starts with a full bucket.
_SET_KEY = text(f"""
WITH before AS (
    SELECT max_running, rate, period_seconds
      FROM concurrency_keys WHERE key = CAST(:key AS text)
), written AS (
    INSERT INTO concurrency_keys AS k (key, max_running, rate, period_seconds, tokens,
                                       refilled_at, updated_by, updated_at)
    VALUES (CAST(:key AS text), CAST(:max_running AS integer), CAST(:rate AS integer),
            CAST(:period_seconds AS float8), CAST(:rate AS float8),
            CASE WHEN CAST(:rate AS integer) IS NULL THEN NULL ELSE now() END,
            CAST(:actor AS text), now())
    ON CONFLICT (key) DO UPDATE
       SET max_running = EXCLUDED.max_running,
           rate = COALESCE(EXCLUDED.rate, k.declared_rate),
           period_seconds = CASE WHEN EXCLUDED.rate IS NULL THEN k.declared_period_seconds
                                 ELSE EXCLUDED.period_seconds END,
           tokens = COALESCE(EXCLUDED.tokens, k.declared_rate::float8),
           refilled_at = CASE WHEN COALESCE(EXCLUDED.rate, k.declared_rate) IS NULL THEN NULL
                              ELSE now() END,
           updated_by = EXCLUDED.updated_by,
           updated_at = now()
    RETURNING {_KEY_COLUMNS}
), recorded AS (
    INSERT INTO scheduling_changes (actor, setting, subject, before, after, note)
    SELECT CAST(:actor AS text), 'concurrency_key', CAST(:key AS text),
           (SELECT jsonb_build_object('max_running', max_running, 'rate', rate,
                                      'period_seconds', period_seconds) FROM before),
           jsonb_build_object('max_running', CAST(:max_running AS integer),
                              'rate', CAST(:rate AS integer),
                              'period_seconds', CAST(:period_seconds AS float8)),
           CAST(:note AS text)
)
SELECT * FROM written
""")

# The row's lock before its change, in a statement of its own: the change's statement then
# starts with a snapshot in which a concurrent change is committed, so its ``before`` is
# the value it replaced (a locking read inside the changing statement would not see the
# row it is about to write).
_LOCK_SHARE = text("SELECT 1 FROM owner_shares WHERE owner = CAST(:owner AS text) FOR UPDATE")
_LOCK_KEY = text("SELECT 1 FROM concurrency_keys WHERE key = CAST(:key AS text) FOR UPDATE")

_SHARES = text("""
SELECT owner, share, updated_by, updated_at FROM owner_shares ORDER BY owner LIMIT :limit
""")
_KEYS = text(f"SELECT {_KEY_COLUMNS} FROM concurrency_keys AS k ORDER BY key LIMIT :limit")
_CHANGES = text("""
SELECT seq, at, actor, setting, subject, before, after, note
  FROM scheduling_changes
 WHERE CAST(:setting AS text) IS NULL OR setting = CAST(:setting AS text)
 ORDER BY seq DESC
 LIMIT :limit
""")


@dataclass(frozen=True, slots=True)
class KeySetting:
    max_running: int | None
    rate: int | None
    period_seconds: float | None


async def set_share(
    conn: AsyncConnection, owner: str, share: int, *, actor: str, note: str | None
) -> Row[Any]:
    await conn.execute(_LOCK_SHARE, {"owner": owner})
    return (
        await conn.execute(
            _SET_SHARE, {"owner": owner, "share": share, "actor": actor, "note": note}
        )
    ).one()


async def set_key(
    conn: AsyncConnection, key: str, setting: KeySetting, *, actor: str, note: str | None
) -> Row[Any]:
    await conn.execute(_LOCK_KEY, {"key": key})
    return (
        await conn.execute(
            _SET_KEY,
            {
                "key": key,
                "max_running": setting.max_running,
                "rate": setting.rate,
                "period_seconds": setting.period_seconds,
                "actor": actor,
                "note": note,
            },
        )
    ).one()


async def shares(conn: AsyncConnection, *, limit: int = 1000) -> list[Row[Any]]:
    return list((await conn.execute(_SHARES, {"limit": limit})).all())


async def keys(conn: AsyncConnection, *, limit: int = 1000) -> list[Row[Any]]:
    return list((await conn.execute(_KEYS, {"limit": limit})).all())


async def changes(
    conn: AsyncConnection, *, setting: str | None = None, limit: int = 100
) -> list[Row[Any]]:
    return list((await conn.execute(_CHANGES, {"setting": setting, "limit": limit})).all())
