"""Revision a3b4c5d6e7f8 (the CHECKs of jobs as one call of ``atlas_jobs_fits``) on a
database that already has jobs in every state: the upgrade re-validates every row under
the new constraint, the downgrade restores the former constraints exactly (as
PostgreSQL renders them) and ``atlas_reason_fits``; both refuse a broken row naming the
same rule."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.engine import create_engine
from atlas_jobs._app.lifecycle import JobState
from tests.migration.rows import RawJobs
from tests.support import Server, alembic

REVISION = "a3b4c5d6e7f8"
PARENT = "b4c5d6e7f8a9"
CHECKS = """
SELECT CAST(conrelid AS regclass)::text, conname::text, pg_get_constraintdef(oid)
  FROM pg_constraint
 WHERE contype = 'c' AND CAST(conrelid AS regclass)::text = 'jobs'
"""
FUNCTIONS = "SELECT proname::text FROM pg_proc WHERE proname = 'atlas_jobs_fits'"
REASON_FITS = "SELECT proname::text FROM pg_proc WHERE proname = 'atlas_reason_fits'"
BROKEN = (
    ("UPDATE jobs SET lease_expires_at = now() WHERE state = 'queued'", "ck_jobs_lease_iff_active"),
    ("UPDATE jobs SET reason = 'new' WHERE state = 'running'", "ck_jobs_reason_matches_state"),
    ("UPDATE jobs SET delivery_state = 'bogus'", "ck_jobs_delivery_state_known"),
    ("UPDATE jobs SET error = NULL WHERE state = 'failed'", "ck_jobs_failed_has_error"),
)


async def catalog(engine: AsyncEngine, sql: str) -> set[tuple[str, ...]]:
    async with engine.connect() as conn:
        return {tuple(str(v) for v in row) for row in await conn.execute(text(sql))}


async def refusals(engine: AsyncEngine) -> list[str]:
    """The constraint each broken write is refused by ("" when it is not refused)."""
    found = []
    for sql, _ in BROKEN:
        try:
            async with engine.begin() as conn:
                await conn.execute(text(sql))
        except IntegrityError as exc:
            found.append(next((rule for _, rule in BROKEN if f'"{rule}"' in str(exc)), str(exc)))
        else:
            found.append("")
    return found


async def test_upgrade_and_downgrade_with_rows_keep_every_rule(pg_server: Server) -> None:
    async with pg_server.scratch_database() as url:
        await alembic(url, "upgrade", PARENT)
        engine = create_engine(url, pool_size=2)
        try:
            jobs = RawJobs(engine)
            for state in JobState:
                await jobs.make(state)
            former = await catalog(engine, CHECKS)
            assert len(former) == 11
            expected = [rule for _, rule in BROKEN]
            assert await refusals(engine) == expected

            await alembic(url, "upgrade", REVISION)  # validates every row
            assert {name for _, name, _ in await catalog(engine, CHECKS)} == {"ck_jobs_rules"}
            assert await catalog(engine, REASON_FITS) == set()
            assert await refusals(engine) == expected
            await jobs.make(JobState.SUCCEEDED)

            await alembic(url, "downgrade", PARENT)
            assert await catalog(engine, CHECKS) == former
            assert await catalog(engine, FUNCTIONS) == set()
            assert await catalog(engine, REASON_FITS) == {("atlas_reason_fits",)}
            assert await refusals(engine) == expected
            await jobs.make(JobState.SUCCEEDED)
        finally:
            await engine.dispose()
