"""Revision c7d8e9f0a1b2 (server-side status-page sessions, key holders, the key behind
each submission) on a database that already has keys and a job: existing rows keep their
values and get no holder/key; the new columns and table work; the downgrade drops them
and leaves the rest as it was."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from atlas_jobs._app.db.engine import create_engine
from tests.support import Server, alembic

REVISION = "c7d8e9f0a1b2"
PARENT = "a3b4c5d6e7f8"
ADD_KEY = (
    "INSERT INTO api_keys (key_hash, prefix, owner, roles)"
    " VALUES ('h1', 'atlas_abcdef', 'alice', ARRAY['client']) RETURNING id"
)
ADD_JOB = """
WITH job AS (
    INSERT INTO jobs (owner, kind, kind_version, input, state, reason, max_attempts,
                      max_elapsed_seconds)
    VALUES ('alice', 'k', 1, '{}', 'queued', 'new', 1, 60) RETURNING id
)
INSERT INTO job_history (job_id, transition, to_state, reason, actor)
SELECT id, 'create', 'queued', 'new', 'client:alice' FROM job
"""
COLUMNS = (
    "SELECT table_name || '.' || column_name FROM information_schema.columns"
    " WHERE (table_name, column_name) IN (('api_keys', 'holder'), ('job_history', 'key_id'))"
    " OR table_name = 'ui_sessions' ORDER BY 1"
)


async def test_upgrade_and_downgrade_with_keys_and_jobs(pg_server: Server) -> None:
    async with pg_server.scratch_database() as url:
        await alembic(url, "upgrade", PARENT)
        engine = create_engine(url, pool_size=2)
        try:
            async with engine.begin() as conn:
                key_id = (await conn.execute(text(ADD_KEY))).scalar_one()
                await conn.execute(text(ADD_JOB))  # raw SQL: today's code writes key_id
            await alembic(url, "upgrade", REVISION)
            async with engine.begin() as conn:
                assert (await conn.execute(text("SELECT holder FROM api_keys"))).all() == [(None,)]
                assert (await conn.execute(text("SELECT count(*) FROM job_history"))).scalar()
                assert not (
                    await conn.execute(
                        text("SELECT count(*) FROM job_history WHERE key_id IS NOT NULL")
                    )
                ).scalar()
                await conn.execute(text("UPDATE api_keys SET holder = 'Alice A.'"))
                await conn.execute(
                    text(
                        "INSERT INTO ui_sessions (token_hash, key_id, expires_at)"
                        " VALUES ('t', :k, now() + interval '1 hour')"
                    ),
                    {"k": key_id},
                )
            for bad in (" padded ", "", "x" * 201):
                with pytest.raises(IntegrityError, match="ck_api_keys_holder_trimmed"):
                    async with engine.begin() as conn:
                        await conn.execute(text("UPDATE api_keys SET holder = :h"), {"h": bad})
            async with engine.begin() as conn:
                assert len((await conn.execute(text(COLUMNS))).all()) == 6

            await alembic(url, "downgrade", PARENT)
            async with engine.begin() as conn:
                assert (await conn.execute(text(COLUMNS))).all() == []
                assert (await conn.execute(text("SELECT owner FROM api_keys"))).all() == [
                    ("alice",)
                ]
            await alembic(url, "upgrade", REVISION)  # and up again
        finally:
            await engine.dispose()
