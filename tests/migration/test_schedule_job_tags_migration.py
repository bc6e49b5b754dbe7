"""Revision 829e19e3d198 (a schedule's job keeps its tags) on a database that already has
a schedule: the upgrade keeps it with no tags (``'{}'``: the tags it was sent were never
stored), a schedule can then store tags, and the downgrade drops the column again."""

from __future__ import annotations

from sqlalchemy import text

from atlas_jobs._app.db.engine import create_engine
from tests.support import Server, alembic

REVISION = "829e19e3d198"
PARENT = "2c8e4a6f0b37"
SCHEDULE = """
INSERT INTO schedules (id, owner, cron, timezone, kind, kind_version, input, enabled,
                       misfire_policy, misfire_grace_seconds, catch_up_limit,
                       next_fire_at, created_by)
VALUES ('00000000-0000-0000-0000-000000000001', 'alice', '0 2 * * *', 'UTC', 'atlas.noop',
        1, '{}', true, 'skip', 60, 10, now(), 'client:alice')
"""
COLUMN = """
SELECT count(*) FROM information_schema.columns
 WHERE table_name = 'schedules' AND column_name = 'job_tags'
"""


async def test_upgrade_keeps_schedules_untagged_stores_tags_and_downgrades(
    pg_server: Server,
) -> None:
    async with pg_server.scratch_database() as url:
        await alembic(url, "upgrade", PARENT)
        engine = create_engine(url, pool_size=2)
        try:
            async with engine.begin() as conn:
                await conn.execute(text(SCHEDULE))

            await alembic(url, "upgrade", REVISION)
            async with engine.begin() as conn:
                kept = await conn.scalar(text("SELECT job_tags FROM schedules"))
                assert kept == []
                await conn.execute(
                    text("UPDATE schedules SET job_tags = ARRAY['customer=acme', 'team=data']")
                )
                stored = await conn.scalar(text("SELECT job_tags FROM schedules"))
                assert stored == ["customer=acme", "team=data"]

            await alembic(url, "downgrade", PARENT)
            async with engine.connect() as conn:
                assert await conn.scalar(text(COLUMN)) == 0
                assert await conn.scalar(text("SELECT count(*) FROM schedules")) == 1
        finally:
            await engine.dispose()
