"""Revision 5e8b2d4f6a17 (attempts without their foreign key to jobs): the upgrade keeps
every attempt, and from then on deleting a job leaves its attempts to whoever deletes it
(the pruner deletes them itself); the downgrade drops attempts whose job is gone, keeps
the others, and brings the key back, with its cascade."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from atlas_jobs._app.db.engine import create_engine
from atlas_jobs._app.lifecycle import JobState
from tests.migration.rows import RawJobs
from tests.support import Server, alembic

REVISION = "5e8b2d4f6a17"
PARENT = "6d2f8a4c1e93"
ATTEMPT = text("""
INSERT INTO attempts (id, job_id, number, worker_id, lease_expires_at)
VALUES (gen_random_uuid(), :job_id, 1, 'w-1', now() + interval '1 minute')
""")
ATTEMPTS_OF = text("SELECT count(*) FROM attempts WHERE job_id = :job_id")


async def test_upgrade_keeps_attempts_downgrade_drops_orphans_and_restores_the_key(
    pg_server: Server,
) -> None:
    async with pg_server.scratch_database() as url:
        await alembic(url, "upgrade", PARENT)
        engine = create_engine(url, pool_size=2)
        try:
            raw = RawJobs(engine)
            kept, doomed = await raw.make(JobState.RUNNING), await raw.make(JobState.RUNNING)
            async with engine.begin() as conn:
                for job_id in (kept, doomed):
                    await conn.execute(ATTEMPT, {"job_id": job_id})

            await alembic(url, "upgrade", REVISION)
            async with engine.begin() as conn:
                assert await conn.scalar(text("SELECT count(*) FROM attempts")) == 2
                await conn.execute(text("DELETE FROM jobs WHERE id = :id"), {"id": doomed})
                # No cascade any more: the attempt stays until its deleter removes it.
                assert await conn.scalar(ATTEMPTS_OF, {"job_id": doomed}) == 1

            await alembic(url, "downgrade", PARENT)
            async with engine.begin() as conn:
                assert await conn.scalar(ATTEMPTS_OF, {"job_id": doomed}) == 0
                assert await conn.scalar(ATTEMPTS_OF, {"job_id": kept}) == 1
                await conn.execute(text("DELETE FROM jobs WHERE id = :id"), {"id": kept})
                assert await conn.scalar(ATTEMPTS_OF, {"job_id": kept}) == 0  # the cascade
            with pytest.raises(IntegrityError, match="fk_attempts_job_id_jobs"):
                async with engine.begin() as conn:
                    await conn.execute(ATTEMPT, {"job_id": uuid.uuid4()})
        finally:
            await engine.dispose()
