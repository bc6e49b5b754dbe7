"""Revision 33017a7e68cb (the worker registry): the upgrade adds ``worker_processes``
beside existing jobs, the registry's writes and its read work on it, and the downgrade
drops it and nothing else."""

from __future__ import annotations

from sqlalchemy import text

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import reads, workers
from atlas_jobs._app.db.engine import create_engine
from atlas_jobs._app.lifecycle import JobState
from tests.migration.rows import RawJobs
from tests.support import Server, alembic

REVISION = "33017a7e68cb"
PARENT = "c7d8e9f0a1b2"
TABLES = "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"


async def test_upgrade_adds_the_registry_and_downgrade_drops_only_it(pg_server: Server) -> None:
    async with pg_server.scratch_database() as url:
        await alembic(url, "upgrade", PARENT)
        engine = create_engine(url, pool_size=2)
        clock = Clock()
        try:
            await RawJobs(engine).make(JobState.QUEUED)
            async with engine.connect() as conn:
                before = set((await conn.execute(text(TABLES))).scalars())
            assert "worker_processes" not in before

            await alembic(url, "upgrade", REVISION)
            async with engine.begin() as conn:
                await workers.beat(
                    conn,
                    clock,
                    worker_id="w1",
                    host="h",
                    pid=1,
                    serves=["atlas.bundle@1", "atlas.noop@1"],
                    concurrency=2,
                )
            async with engine.connect() as conn:
                live = await reads.live_workers(conn, clock.now(), window_seconds=15)
                jobs = (await conn.execute(text("SELECT count(*) FROM jobs"))).scalar_one()
            assert live == {"atlas.bundle@1": 1, "atlas.noop@1": 1}
            assert jobs == 1

            await alembic(url, "downgrade", PARENT)
            async with engine.connect() as conn:
                after = set((await conn.execute(text(TABLES))).scalars())
            assert after == before
        finally:
            await engine.dispose()
