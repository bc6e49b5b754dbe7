"""Revision b8fd571ff01f (tags, search indexes, bulk operations) on a database that
already has jobs and keys: the upgrade gives the jobs no tags and the keys every kind,
a bulk operation can then be recorded while the CHECKs refuse an unknown action or state
and a selection that is both a filter and an id list (or neither), and the downgrade
drops it all again, keeping the jobs."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from atlas_jobs._app.db.engine import create_engine
from tests.support import Server, alembic

REVISION = "b8fd571ff01f"
PARENT = "fb1ecd289857"
JOB = """
INSERT INTO jobs (owner, kind, kind_version, input, state, reason, max_attempts,
                  max_elapsed_seconds)
VALUES ('alice', 'atlas.noop', 1, '{}', 'queued', 'new', 3, 600)
"""
KEY = """
INSERT INTO api_keys (key_hash, prefix, owner, roles)
VALUES ('hash', 'atlas_abcdef', 'ops', ARRAY['operator'])
"""
OPERATION = """
INSERT INTO bulk_operations (id, action, state, filter, job_ids, requested_by, through_seq,
                             finished_at)
VALUES (gen_random_uuid(), {action}, {state}, {filter}, {ids}, 'operator:ops', 0, {finished})
"""
INDEXES = """
SELECT indexname FROM pg_indexes
 WHERE indexname IN ('ix_jobs_seq', 'ix_jobs_attention', 'ix_jobs_tags')
"""


def operation(**values: str) -> str:
    chosen = {
        "action": "'resume'",
        "state": "'queued'",
        "filter": "'{}'::jsonb",
        "ids": "NULL",
        "finished": "NULL",
    } | values
    return OPERATION.format(**chosen)


async def test_upgrade_keeps_jobs_records_operations_and_downgrades(pg_server: Server) -> None:
    async with pg_server.scratch_database() as url:
        await alembic(url, "upgrade", PARENT)
        engine = create_engine(url, pool_size=2)
        try:
            async with engine.begin() as conn:
                await conn.execute(text(JOB))
                await conn.execute(text(KEY))

            await alembic(url, "upgrade", REVISION)
            async with engine.begin() as conn:
                assert (await conn.execute(text("SELECT tags FROM jobs"))).scalar_one() == []
                assert (await conn.execute(text("SELECT kinds FROM api_keys"))).scalar_one() is None
                assert len((await conn.execute(text(INDEXES))).all()) == 3
                await conn.execute(text(operation()))
                await conn.execute(text(operation(state="'succeeded'", finished="now()")))
            for bad in (
                operation(action="'delete'"),
                operation(state="'paused'"),
                operation(state="'succeeded'"),  # ended, but no finished_at
                operation(ids="ARRAY[gen_random_uuid()]"),  # a filter and ids
                operation(filter="NULL"),  # neither
            ):
                with pytest.raises(IntegrityError):
                    async with engine.begin() as conn:
                        await conn.execute(text(bad))

            await alembic(url, "downgrade", PARENT)
            async with engine.connect() as conn:
                assert (await conn.execute(text(INDEXES))).all() == []
                gone = await conn.execute(text("SELECT to_regclass('bulk_operations')"))
                assert gone.scalar_one() is None
                assert (await conn.execute(text("SELECT count(*) FROM jobs"))).scalar_one() == 1
        finally:
            await engine.dispose()
