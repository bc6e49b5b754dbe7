"""Revision 9c3d5e7f1a24 (the tag search's side table) on a database with tagged and
untagged jobs of two owners: the upgrade creates ``job_tags`` with one row per tag of
every tagged job (none for an untagged one) and drops the GIN index ``ix_jobs_tags``;
the downgrade restores the GIN index and drops the table, and upgrading again backfills
the same rows."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.db.engine import create_engine
from tests.support import Server, alembic

REVISION = "9c3d5e7f1a24"
PARENT = "7e2b4c6d8f10"
JOBS = """
INSERT INTO jobs (owner, kind, kind_version, input, state, reason, max_attempts,
                  max_elapsed_seconds, tags)
SELECT CASE WHEN g % 2 = 0 THEN 'alice' ELSE 'bob' END, 'atlas.noop', 1, '{}', 'queued',
       'new', 3, 600,
       CASE WHEN g % 3 = 0 THEN '{}'::text[]
            WHEN g % 3 = 1 THEN ARRAY['batch=' || (g % 4)]
            ELSE ARRAY['batch=' || (g % 4), 'team=t' || (g % 2)] END
  FROM generate_series(1, 30) AS g
"""
EXPECTED = "SELECT unnest(tags) AS tag, id FROM jobs"
ROWS = "SELECT tag, job_id FROM job_tags"
GIN = "SELECT count(*) FROM pg_indexes WHERE indexname = 'ix_jobs_tags'"
TABLE = "SELECT to_regclass('job_tags') IS NOT NULL"


async def _pairs(conn: AsyncConnection, query: str) -> set[tuple[str, str]]:
    return {(tag, str(job_id)) for tag, job_id in await conn.execute(text(query))}


async def test_upgrade_backfills_job_tags_and_drops_the_gin_index_and_downgrades(
    pg_server: Server,
) -> None:
    async with pg_server.scratch_database() as url:
        await alembic(url, "upgrade", PARENT)
        engine = create_engine(url, pool_size=2)
        try:
            async with engine.begin() as conn:
                await conn.execute(text(JOBS))
                expected = await _pairs(conn, EXPECTED)
                assert await conn.scalar(text(GIN)) == 1
            assert len(expected) == 10 + 2 * 10  # untagged jobs have none

            await alembic(url, "upgrade", REVISION)
            async with engine.begin() as conn:
                assert await _pairs(conn, ROWS) == expected
                assert await conn.scalar(text(GIN)) == 0
                pk = await conn.scalar(
                    text("SELECT indexdef FROM pg_indexes WHERE indexname = 'pk_job_tags'")
                )
                assert pk is not None
                assert pk.endswith("(tag, job_id)"), pk

            await alembic(url, "downgrade", PARENT)
            async with engine.begin() as conn:
                assert await conn.scalar(text(GIN)) == 1
                assert await conn.scalar(text(TABLE)) is False
                gin = await conn.scalar(
                    text("SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_jobs_tags'")
                )
                assert "USING gin (tags)" in gin, gin
                assert "WHERE (tags <> '{}'::text[])" in gin, gin

            await alembic(url, "upgrade", REVISION)  # and up again: the same rows
            async with engine.begin() as conn:
                assert await _pairs(conn, ROWS) == expected
        finally:
            await engine.dispose()
