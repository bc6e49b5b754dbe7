"""Revision 5c1d2e3f4a6b (delayed jobs and start deadlines) on a database that already
holds jobs: the upgrade keeps them without a delay or a deadline, a job can then carry
``run_at``/``start_by`` and end with the new reason ``start_deadline_passed`` (which the
row rules allow only for ``failed``), the partial index serves the sweeper's selection,
and the downgrade gives such jobs the reason ``error`` and drops the columns (the
schedules' job timing too)."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from atlas_jobs._app.db.engine import create_engine
from tests.support import Server, alembic

REVISION = "5c1d2e3f4a6b"
PARENT = "4e5f6a7b8c9d"
JOB = """
INSERT INTO jobs (id, owner, kind, kind_version, input, state, reason, max_attempts,
                  max_elapsed_seconds)
VALUES (CAST(:id AS uuid), 'alice', 'atlas.noop', 1, '{}', 'queued', 'new', 3, 600)
"""
OLD = "00000000-0000-0000-0000-000000000001"
NEW = "00000000-0000-0000-0000-000000000002"
COLUMNS = """
SELECT table_name || '.' || column_name FROM information_schema.columns
 WHERE column_name IN ('run_at', 'start_by', 'job_delay_seconds', 'job_start_within_seconds')
"""
MISS = """
UPDATE jobs SET state = 'failed', reason = 'start_deadline_passed', finished_at = now(),
                error = '{"code": "start_deadline_passed"}'
 WHERE id = CAST(:id AS uuid)
"""


async def test_upgrade_keeps_jobs_allows_the_new_reason_and_downgrades(
    pg_server: Server,
) -> None:
    async with pg_server.scratch_database() as url:
        await alembic(url, "upgrade", PARENT)
        engine = create_engine(url, pool_size=2)
        try:
            async with engine.begin() as conn:
                await conn.execute(text(JOB), {"id": OLD})
            with pytest.raises(IntegrityError):  # the reason is not known yet
                async with engine.begin() as conn:
                    await conn.execute(text(MISS), {"id": OLD})

            await alembic(url, "upgrade", REVISION)
            async with engine.begin() as conn:
                added = {row[0] for row in await conn.execute(text(COLUMNS))}
                assert added == {
                    "jobs.run_at",
                    "jobs.start_by",
                    "schedules.job_delay_seconds",
                    "schedules.job_start_within_seconds",
                }
                kept = (await conn.execute(text("SELECT run_at, start_by FROM jobs"))).one()
                assert tuple(kept) == (None, None)
                await conn.execute(text(JOB), {"id": NEW})
                await conn.execute(
                    text(
                        "UPDATE jobs SET run_at = now() + interval '1 hour',"
                        " start_by = now() - interval '1 second' WHERE id = CAST(:id AS uuid)"
                    ),
                    {"id": NEW},
                )
                await conn.execute(text("SET LOCAL enable_seqscan = off"))
                plan = "\n".join(
                    row[0]
                    for row in await conn.execute(
                        text(
                            "EXPLAIN SELECT id FROM jobs WHERE state = 'queued' AND attempt = 0"
                            " AND start_by IS NOT NULL AND start_by <= now() ORDER BY start_by"
                        )
                    )
                )
                assert "ix_jobs_start_by" in plan
                await conn.execute(text(MISS), {"id": NEW})
            with pytest.raises(IntegrityError):  # only a failed job has that reason
                async with engine.begin() as conn:
                    await conn.execute(
                        text("UPDATE jobs SET reason = 'start_deadline_passed' WHERE id = :id"),
                        {"id": OLD},
                    )

            await alembic(url, "downgrade", PARENT)
            async with engine.connect() as conn:
                assert (await conn.execute(text(COLUMNS))).all() == []
                reasons = await conn.execute(text("SELECT id::text, reason FROM jobs ORDER BY id"))
                assert [tuple(row) for row in reasons] == [(OLD, "new"), (NEW, "error")]
        finally:
            await engine.dispose()
