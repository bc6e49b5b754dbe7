"""Revision f2a3b4c5d6e7 (the backlog counted on the connection's slot) on a database that
already has jobs: the upgrade keeps every owner's sum; rows may then go below zero; the
downgrade recounts the rows by id slot, restores the per-row CHECK, and the previous
triggers count what comes after."""

from __future__ import annotations

from contextlib import AsyncExitStack

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from atlas_jobs._app.db.engine import create_engine
from atlas_jobs._app.db.schema import TERMINAL_SQL
from atlas_jobs._app.lifecycle import JobState
from tests.migration.rows import RawJobs
from tests.support import Server, alembic

REVISION = "f2a3b4c5d6e7"
PARENT = "e1f2a3b4c5d6"
BACKLOG = "SELECT owner, sum(unfinished) FROM owner_backlog GROUP BY owner"
COUNTED = f"SELECT owner, count(*) FROM jobs WHERE state NOT IN ({TERMINAL_SQL}) GROUP BY owner"
ROWS = "SELECT owner || ':' || slot, unfinished FROM owner_backlog WHERE unfinished <> 0"
ROWS_BY_ID_SLOT = (
    "SELECT owner || ':' || (get_byte(uuid_send(id), 15) & 15), count(*) FROM jobs"
    f" WHERE state NOT IN ({TERMINAL_SQL}) GROUP BY 1"
)
CHECKED = (
    "SELECT 'not negative', count(*) FROM pg_constraint"
    " WHERE conname = 'ck_owner_backlog_unfinished_not_negative'"
)
SLOT = "SELECT pg_backend_pid() & 15"
CREATE_TWO = """
INSERT INTO jobs (owner, kind, kind_version, input, state, reason, max_attempts,
                  max_elapsed_seconds)
SELECT 'nina', 'k', 1, '{}', 'queued', 'new', 1, 60 FROM generate_series(1, 2)
"""
CANCEL_ONE = """
UPDATE jobs SET state = 'canceled', reason = 'canceled', finished_at = now()
 WHERE id = (SELECT id FROM jobs WHERE owner = 'nina' AND state = 'queued' ORDER BY id LIMIT 1)
"""


async def rows(engine: AsyncEngine, sql: str) -> dict[str, int]:
    async with engine.connect() as conn:
        return {row[0]: int(row[1]) for row in await conn.execute(text(sql))}


async def assert_exact(engine: AsyncEngine) -> None:
    kept = {owner: n for owner, n in (await rows(engine, BACKLOG)).items() if n}
    assert kept == await rows(engine, COUNTED)


async def below_zero_on_two_connections(engine: AsyncEngine) -> None:
    """Two jobs of a new owner created on one connection, one canceled on a connection with
    another slot: that row is -1, the creator's is 2, the sum 1."""
    async with AsyncExitStack() as stack:
        slots: dict[int, AsyncConnection] = {}
        while len(slots) < 2:  # two connections whose slots differ
            conn = await stack.enter_async_context(engine.connect())
            slots.setdefault((await conn.execute(text(SLOT))).scalar_one(), conn)
        (creator_slot, creator), (other_slot, other) = slots.items()
        await creator.execute(text(CREATE_TWO))
        await creator.commit()
        await other.execute(text(CANCEL_ONE))
        await other.commit()
    nina = {key: n for key, n in (await rows(engine, ROWS)).items() if key.startswith("nina:")}
    assert nina == {f"nina:{creator_slot}": 2, f"nina:{other_slot}": -1}


async def test_upgrade_and_downgrade_with_jobs_keep_every_owners_count(
    pg_server: Server,
) -> None:
    async with pg_server.scratch_database() as url:
        await alembic(url, "upgrade", PARENT)
        engine = create_engine(url, pool_size=2)
        try:
            jobs = RawJobs(engine)
            for state in (JobState.QUEUED, JobState.SUCCEEDED, JobState.WAITING):
                await jobs.make(state, owner="alice")
            for state in (JobState.RUNNING, JobState.FAILED, JobState.UNRESOLVED):
                await jobs.make(state, owner="bob")

            await alembic(url, "upgrade", REVISION)
            assert await rows(engine, CHECKED) == {"not negative": 0}
            await assert_exact(engine)
            await jobs.make(JobState.SUCCEEDED, owner="alice")
            await jobs.make(JobState.RUNNING, owner="bob")
            await below_zero_on_two_connections(engine)
            await assert_exact(engine)
            assert await rows(engine, COUNTED) == {"alice": 2, "bob": 3, "nina": 1}

            await alembic(url, "downgrade", PARENT)  # the rows by id slot again, all >= 0
            assert await rows(engine, CHECKED) == {"not negative": 1}
            await assert_exact(engine)
            assert await rows(engine, ROWS) == await rows(engine, ROWS_BY_ID_SLOT)
            await jobs.make(JobState.QUEUED, owner="carol")
            await jobs.make(JobState.FAILED, owner="nina")
            assert await rows(engine, ROWS) == await rows(engine, ROWS_BY_ID_SLOT)
            assert await rows(engine, COUNTED) == {"alice": 2, "bob": 3, "nina": 1, "carol": 1}
        finally:
            await engine.dispose()
