"""Revision c4d5e6f7a8b9 (``owner_backlog``) on a database that already has jobs: the
upgrade backfills the counters from them, the downgrade drops the counters and restores
the counting ``atlas_admission_count``, and the triggers count what comes after."""

from __future__ import annotations

from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.engine import create_engine
from atlas_jobs._app.db.schema import TERMINAL_SQL
from atlas_jobs._app.lifecycle import JobState
from tests.migration.rows import RawJobs
from tests.support import Server, alembic, alembic_config

REVISION = "c4d5e6f7a8b9"
BACKLOG = "SELECT owner, sum(unfinished) FROM owner_backlog GROUP BY owner"
COUNTED = f"SELECT owner, count(*) FROM jobs WHERE state NOT IN ({TERMINAL_SQL}) GROUP BY owner"


async def rows(engine: AsyncEngine, sql: str) -> dict[str, int]:
    async with engine.connect() as conn:
        return {row[0]: int(row[1]) for row in await conn.execute(text(sql))}


async def admitted(engine: AsyncEngine, owner: str) -> int:
    async with engine.begin() as conn:
        query = text("SELECT atlas_admission_count(:owner, 100)")
        return int((await conn.execute(query, {"owner": owner})).scalar_one())


async def test_upgrade_backfills_existing_jobs_and_downgrade_restores_counting(
    pg_server: Server,
) -> None:
    async with pg_server.scratch_database() as url:
        parent = ScriptDirectory.from_config(alembic_config(url)).get_revision(REVISION)
        assert parent is not None
        assert isinstance(parent.down_revision, str)
        await alembic(url, "upgrade", REVISION)
        engine = create_engine(url, pool_size=2)
        try:
            jobs = RawJobs(engine)
            for state in (JobState.QUEUED, JobState.QUEUED, JobState.SUCCEEDED):
                await jobs.make(state, owner="alice")
            for state in (JobState.RUNNING, JobState.FAILED, JobState.WAITING):
                await jobs.make(state, owner="bob")

            await alembic(url, "downgrade", parent.down_revision)
            assert (
                await rows(
                    engine, "SELECT relname, 0 FROM pg_class WHERE relname = 'owner_backlog'"
                )
                == {}
            )
            triggers = await rows(
                engine, "SELECT tgname, 0 FROM pg_trigger WHERE tgname LIKE 'jobs_backlog_%'"
            )
            assert triggers == {}
            assert await admitted(engine, "alice") == 2  # counted again, from jobs
            # Written while no trigger counts: the backfill must find these too.
            await jobs.make(JobState.CANCELED, owner="alice")
            await jobs.make(JobState.UNRESOLVED, owner="alice")
            await jobs.make(JobState.QUEUED, owner="carol")

            await alembic(url, "upgrade", REVISION)
            expected = {"alice": 3, "bob": 2, "carol": 1}
            assert await rows(engine, COUNTED) == expected
            assert await rows(engine, BACKLOG) == expected
            assert await admitted(engine, "bob") == 2

            await jobs.make(JobState.QUEUED, owner="bob")  # the triggers count from here
            assert await rows(engine, BACKLOG) == {
                **expected,
                "bob": 3,
            }
        finally:
            await engine.dispose()
