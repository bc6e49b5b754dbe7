"""Revision d0e1f2a3b4c5 (one insert trigger, the state/reason rule as a function) on a
database that already has jobs: the upgrade keeps the backlog counters exact and
re-validates the rule on every row; the downgrade restores the two insert triggers and
the inline rule, and both versions count what comes after."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.engine import create_engine
from atlas_jobs._app.db.schema import TERMINAL_SQL
from atlas_jobs._app.lifecycle import JobState
from tests.migration.rows import RawJobs
from tests.support import Server, alembic

REVISION = "d0e1f2a3b4c5"
PARENT = "c4d5e6f7a8b9"
BACKLOG = "SELECT owner, sum(unfinished) FROM owner_backlog GROUP BY owner"
COUNTED = f"SELECT owner, count(*) FROM jobs WHERE state NOT IN ({TERMINAL_SQL}) GROUP BY owner"
INSERT_TRIGGERS = """
SELECT tgname FROM pg_trigger
 WHERE tgrelid = CAST('jobs' AS regclass) AND NOT tgisinternal AND tgtype & 4 = 4
"""
RULE = (
    "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
    " WHERE conname = 'ck_jobs_reason_matches_state'"
)
WRONG_REASON = """
INSERT INTO jobs (owner, kind, kind_version, input, state, reason, max_attempts,
                  max_elapsed_seconds)
VALUES ('mallory', 'k', 1, '{}', 'queued', 'claimed', 1, 60)
"""


async def rows(engine: AsyncEngine, sql: str) -> dict[str, int]:
    async with engine.connect() as conn:
        return {row[0]: int(row[1]) for row in await conn.execute(text(sql))}


async def names(engine: AsyncEngine, sql: str) -> set[str]:
    async with engine.connect() as conn:
        return {row[0] for row in await conn.execute(text(sql))}


async def refuses_a_wrong_reason(engine: AsyncEngine) -> bool:
    try:
        async with engine.begin() as conn:
            await conn.execute(text(WRONG_REASON))
    except IntegrityError as exc:
        return "ck_jobs_reason_matches_state" in str(exc)
    return False


async def test_upgrade_and_downgrade_with_jobs_keep_the_counters_and_the_rule(
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

            await alembic(url, "upgrade", REVISION)  # re-validates the rule on each row
            assert await names(engine, INSERT_TRIGGERS) == {"jobs_inserted"}
            assert await names(engine, RULE) == {"CHECK (atlas_reason_fits(state, reason))"}
            assert await refuses_a_wrong_reason(engine)
            await jobs.make(JobState.QUEUED, owner="bob")
            assert await rows(engine, BACKLOG) == await rows(engine, COUNTED)
            assert await rows(engine, COUNTED) == {"alice": 2, "bob": 3}

            await alembic(url, "downgrade", PARENT)
            assert await names(engine, INSERT_TRIGGERS) == {
                "jobs_notify_inserted",
                "jobs_backlog_inserted",
            }
            [inline] = await names(engine, RULE)
            assert "atlas_reason_fits" not in inline
            assert await refuses_a_wrong_reason(engine)
            await jobs.make(JobState.QUEUED, owner="carol")
            assert await rows(engine, BACKLOG) == await rows(engine, COUNTED)
            assert await rows(engine, COUNTED) == {"alice": 2, "bob": 3, "carol": 1}
        finally:
            await engine.dispose()
