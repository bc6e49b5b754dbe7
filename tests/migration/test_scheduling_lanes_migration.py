"""Revision 5d1a9c3e7b20 (priority, lanes, concurrency keys) on a database that already
has queued, running and finished jobs: the upgrade gives every queued job the default
priority and no key, adds a lane for each owner and kind with queued work (so the new
claim takes them, fairly), and the downgrade removes the columns and tables again while
the old claim still takes what is queued."""

from __future__ import annotations

from sqlalchemy import text

from atlas_jobs._app.db.engine import create_engine
from tests.support import Server, alembic

REVISION = "5d1a9c3e7b20"
PARENT = "5c1d2e3f4a6b"
JOBS = """
INSERT INTO jobs (owner, kind, kind_version, input, state, reason, max_attempts,
                  max_elapsed_seconds, finished_at, error)
SELECT o, 'atlas.noop', 1, '{}', s, r, 3, 600,
       CASE WHEN s = 'failed' THEN now() END,
       CASE WHEN s = 'failed' THEN '{"code": "x"}'::jsonb END
  FROM (VALUES ('alice', 'queued', 'new'), ('alice', 'queued', 'new'),
               ('bob', 'queued', 'new'), ('carol', 'failed', 'error')) AS v (o, s, r)
"""
LANES = "SELECT owner, kind, kind_version, concurrency_key FROM claim_lanes ORDER BY owner"
TABLES = """
SELECT count(*) FROM information_schema.tables
 WHERE table_name IN ('claim_lanes', 'concurrency_keys', 'owner_shares', 'scheduling_changes')
"""


async def test_upgrade_gives_queued_jobs_their_lanes_and_downgrade_removes_them(
    pg_server: Server,
) -> None:
    async with pg_server.scratch_database() as url:
        await alembic(url, "upgrade", PARENT)
        engine = create_engine(url, pool_size=2)
        try:
            async with engine.begin() as conn:
                await conn.execute(text(JOBS))

            await alembic(url, "upgrade", REVISION)
            async with engine.begin() as conn:
                defaults = (
                    await conn.execute(
                        text(
                            "SELECT DISTINCT priority, concurrency_key, concurrency_limit FROM jobs"
                        )
                    )
                ).all()
                assert [tuple(row) for row in defaults] == [(4, "", None)]
                lanes = [tuple(row) for row in await conn.execute(text(LANES))]
                assert lanes == [("alice", "atlas.noop", 1, ""), ("bob", "atlas.noop", 1, "")]
                assert await conn.scalar(text(TABLES)) == 4

            await alembic(url, "downgrade", PARENT)
            async with engine.begin() as conn:
                assert await conn.scalar(text(TABLES)) == 0
                columns = await conn.scalar(
                    text(
                        "SELECT count(*) FROM information_schema.columns WHERE table_name = 'jobs'"
                        " AND column_name IN ('priority', 'concurrency_key', 'concurrency_limit')"
                    )
                )
                assert columns == 0
                # The previous triggers write no lane and no key any more.
                await conn.execute(text(JOBS))
                assert (
                    await conn.scalar(text("SELECT count(*) FROM jobs WHERE state = 'queued'"))
                ) == 6
        finally:
            await engine.dispose()
