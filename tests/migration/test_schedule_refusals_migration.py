"""Revision fb1ecd289857 (schedule fire refusals) on a database that already has a
schedule and a fired tick: the upgrade keeps both (nothing refused), a refused tick can
then be recorded, a refusal with a job or of an unknown reason is refused by the CHECKs,
and the downgrade drops the columns again."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from atlas_jobs._app.db.engine import create_engine
from tests.support import Server, alembic

REVISION = "fb1ecd289857"
PARENT = "33017a7e68cb"
SCHEDULE = """
INSERT INTO schedules (id, owner, cron, timezone, kind, kind_version, input, enabled,
                       misfire_policy, misfire_grace_seconds, catch_up_limit,
                       next_fire_at, created_by)
VALUES ('00000000-0000-0000-0000-000000000001', 'alice', '0 2 * * *', 'UTC', 'atlas.noop',
        1, '{}', true, 'skip', 60, 10, now(), 'client:alice')
"""
FIRE = """
INSERT INTO schedule_fires (schedule_id, fire_at)
VALUES ('00000000-0000-0000-0000-000000000001', CAST(CAST(:at AS text) AS timestamptz))
"""
COLUMNS = """
SELECT table_name || '.' || column_name FROM information_schema.columns
 WHERE column_name IN ('refusal', 'refused_count', 'last_refused_at', 'last_refusal')
"""


async def test_upgrade_keeps_fires_records_refusals_and_downgrades(pg_server: Server) -> None:
    async with pg_server.scratch_database() as url:
        await alembic(url, "upgrade", PARENT)
        engine = create_engine(url, pool_size=2)
        try:
            async with engine.begin() as conn:
                await conn.execute(text(SCHEDULE))
                await conn.execute(text(FIRE), {"at": "2026-12-01T02:00:00Z"})

            await alembic(url, "upgrade", REVISION)
            async with engine.begin() as conn:
                kept = (
                    await conn.execute(text("SELECT refused_count, last_refusal FROM schedules"))
                ).one()
                assert tuple(kept) == (0, None)
                assert (
                    await conn.execute(text("SELECT refusal FROM schedule_fires"))
                ).scalar_one() is None
                await conn.execute(text(FIRE), {"at": "2026-12-02T02:00:00Z"})
                await conn.execute(
                    text(
                        "UPDATE schedule_fires SET refusal = 'owner_at_capacity'"
                        " WHERE fire_at = '2026-12-02T02:00:00Z'"
                    )
                )
            for bad in (
                "refusal = 'whatever'",
                "refusal = 'owner_at_capacity', job_id = (SELECT gen_random_uuid())",
            ):
                with pytest.raises(IntegrityError):
                    async with engine.begin() as conn:
                        await conn.execute(text(f"UPDATE schedule_fires SET {bad}"))

            await alembic(url, "downgrade", PARENT)
            async with engine.connect() as conn:
                assert (await conn.execute(text(COLUMNS))).all() == []
                fires = await conn.execute(text("SELECT count(*) FROM schedule_fires"))
                assert fires.scalar_one() == 2
        finally:
            await engine.dispose()
