"""The hot worker statements are prepared once per connection and then only executed.

SQLAlchemy's asyncpg dialect prepares every statement and keeps the prepared statements
in an LRU per connection, keyed by SQL text; our named ``text()`` statements (the claim)
and the executor's generated statements (a group-committed publication) keep their text
constant whatever the batch size (arrays, not expanding ``IN`` lists), so each costs one
Parse per connection for its lifetime. Worker sessions then run them on their generic
plan (``plan_cache_mode``, ``tests/workers/test_generic_plans.py``): left to choose,
PostgreSQL re-planned every claim once the queue was large (at 1,000,000 queued: 0
generic and 120 custom plans for 120 claims). The server's own view
(``pg_prepared_statements``) is checked, not the client's cache.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.engine import WORKER_SESSION_SETTINGS, create_engine, single_statements
from atlas_jobs._app.kinds import handler_key
from atlas_jobs._app.transitions import Actor, Transitions
from tests.workers.inprocess import Harness

PREPARED = text("""
SELECT statement, generic_plans + custom_plans AS runs
  FROM pg_prepared_statements
 WHERE statement LIKE :prefix
""")


async def _prepared(conn: AsyncConnection, prefix: str) -> list[Any]:
    return list((await conn.execute(PREPARED, {"prefix": prefix})).all())


async def test_claims_and_group_publications_are_prepared_once_and_reused(
    harness: Harness, database_url: str, clock: Clock, transitions: Transitions
) -> None:
    kind = "test.prepared"
    for _ in range(24):
        await harness.create(kind)
    engine = single_statements(
        create_engine(
            database_url, pool_size=1, server_settings=WORKER_SESSION_SETTINGS, pre_ping=False
        )
    )
    actor = Actor("worker", "w-prep")
    try:
        for limit in (1, 2, 3, 4, 5, 6):  # six claims, five batch sizes of publication
            async with engine.connect() as conn:
                claimed = await transitions.claim_to_run(  # the pool's claim
                    conn, worker_id="w-prep", handlers=[handler_key(kind, 1)], limit=limit
                )
                assert len(claimed) == limit
                await transitions.publish_many(
                    conn,
                    [(job.job_id, job.attempt_id) for job in claimed],
                    result_ref={"files": []},
                    ttl_seconds=60,
                    actor=actor,
                    explain_refusals=False,
                )
        async with engine.connect() as conn:
            claims = await _prepared(conn, "%WITH lanes AS%")
            publications = await _prepared(conn, "%'publish'%")
    finally:
        await engine.dispose()
    assert [row.runs for row in claims] == [6], claims  # one statement, six executions
    assert [row.runs for row in publications] == [6], publications
