"""Revisions 9c1d2e3f4a5b (kind pauses) and 4e5f6a7b8c9d (the charts' rollup) on a
database with a finished job: the upgrades add their tables (and the history's BRIN
index), a pause and a rollup pass work on them, and each downgrade removes only what
its upgrade added."""

from __future__ import annotations

from sqlalchemy import text

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import activity, pauses
from atlas_jobs._app.db.engine import create_engine
from atlas_jobs._app.lifecycle import JobState
from atlas_jobs._app.transitions import Transitions
from tests.factory import JobFactory
from tests.support import Server, alembic

PAUSES = "9c1d2e3f4a5b"
ACTIVITY = "4e5f6a7b8c9d"
PARENT = "b8fd571ff01f"
TABLES = "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
INDEXES = "SELECT indexname FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1"


async def test_upgrades_add_pauses_and_the_rollup_and_downgrades_remove_only_them(
    pg_server: Server,
) -> None:
    async with pg_server.scratch_database() as url:
        await alembic(url, "upgrade", PARENT)
        engine = create_engine(url, pool_size=2)
        clock = Clock()
        try:
            async with engine.connect() as conn:
                tables = set((await conn.execute(text(TABLES))).scalars())
                indexes = set((await conn.execute(text(INDEXES))).scalars())
            await alembic(url, "upgrade", PAUSES)  # the claim reads the pauses from here on
            await JobFactory(engine, Transitions(clock, lease_seconds=30)).make(JobState.SUCCEEDED)

            await alembic(url, "upgrade", ACTIVITY)
            async with engine.begin() as conn:
                pause, made = await pauses.pause(
                    conn, clock, kind="atlas.bundle", version=None, actor="operator:o", note="n"
                )
                assert made
                assert await activity.roll_up(conn, clock)
            async with engine.connect() as conn:
                hour = await activity.chart(conn, clock, window_minutes=60, bucket_minutes=1)
                listed = await pauses.paused(conn)
            assert [(p.created, p.succeeded) for p in hour.points] == [(1, 1)]
            assert listed == [pause]

            await alembic(url, "downgrade", PAUSES)
            async with engine.connect() as conn:
                after = set((await conn.execute(text(TABLES))).scalars())
                assert set((await conn.execute(text(INDEXES))).scalars()) - indexes == {
                    "pk_kind_pauses",
                    "pk_kind_pause_events",
                }
            assert after - tables == {"kind_pauses", "kind_pause_events"}

            await alembic(url, "downgrade", PARENT)
            async with engine.connect() as conn:
                assert set((await conn.execute(text(TABLES))).scalars()) == tables
                assert set((await conn.execute(text(INDEXES))).scalars()) == indexes
        finally:
            await engine.dispose()
