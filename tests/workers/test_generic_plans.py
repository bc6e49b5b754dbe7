"""Worker sessions run prepared statements on their generic plan (``plan_cache_mode =
force_generic_plan`` in ``WORKER_SESSION_SETTINGS``): a large queue must not turn every
claim into a fresh planning (the claim's LIMIT is a parameter, so its generic plan is
costed for 10 % of the queued rows and PostgreSQL would otherwise re-plan each claim).

Proven on the server: the claim's executions are all generic in ``pg_prepared_statements``
with 50,000 queued jobs, and the generic plan of every worker statement with a LIMIT (the
claim, the reaper's, the sweeper's and the pruner's selections) walks its partial index
in order -- the same plan the custom planning gives (``test_claiming``,
``test_pruner``) -- read with ``EXPLAIN EXECUTE`` of a ``PREPARE``d statement."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest
from sqlalchemy import TextClause, text
from sqlalchemy.dialects.postgresql import asyncpg as asyncpg_dialect
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.engine import (
    WORKER_SESSION_SETTINGS,
    create_engine,
    libpq_url,
    single_statements,
)
from atlas_jobs._app.db.moves import statement
from atlas_jobs._app.db.queries import (
    CLAIM,
    EXPIRED_LEASES,
    EXPIRED_RESULTS,
    EXPIRED_WAITS,
    PRUNE_FINISHED,
    PRUNE_RECORDS,
)
from atlas_jobs._app.db.render_sql import executed
from atlas_jobs._app.kinds import handler_key
from atlas_jobs._app.lifecycle import TransitionName
from atlas_jobs._app.transitions import Transitions
from tests.workers.bulk import BULK_FINISHED, BULK_QUEUED

PLANS = text("""
SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE :prefix
""")
ARGUMENTS: dict[str, str] = {
    "clock_offset": "0.0",
    "handlers": "'{atlas.noop@1}'",
    "limit": "16",
    "worker_id": "'w-generic'",
    "lease_seconds": "30.0",
    "actor": "'worker:w-generic'",
    "keep_seconds": "0.0",
    "owner": "NULL",
    "job_ids": "'{}'",
}
# Waiting jobs (review), deadlines ahead: with none at all, EXPIRED_WAITS' two partial
# indexes over waiting rows are both empty and the planner's choice between the bounded
# walk of ix_jobs_wait_deadline and a Sort of every waiting job read on ix_jobs_attention
# is a tie that ANALYZE's sample decides. With some, only the walk stops at the LIMIT.
BULK_WAITING = text("""
INSERT INTO jobs (owner, kind, kind_version, input, state, reason, max_attempts,
                  max_elapsed_seconds, wait_deadline_at, wait_on_deadline)
SELECT 'bulk', 'atlas.noop', 1, '{}'::jsonb, 'waiting', 'review', 3, 600,
       now() + make_interval(secs => 3600 + g), 'fail'
  FROM generate_series(1, :n) AS g
""")


@pytest.fixture
async def large_queue(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(BULK_QUEUED, {"kind": "atlas.noop", "n": 50_000})
        await conn.execute(BULK_FINISHED, {"n": 5_000})
        await conn.execute(BULK_WAITING, {"n": 1_000})
        await conn.execute(text("ANALYZE jobs"))


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


async def _generic_plan(url: str, statement: TextClause) -> dict[str, Any]:
    """The plan a worker session caches for ``statement``: PREPAREd there and read with
    EXPLAIN EXECUTE (EXPLAIN (GENERIC_PLAN) is PostgreSQL 16+; the project runs on 15)."""
    compiled = statement.compile(dialect=asyncpg_dialect.dialect())
    # A batched move's step fields (``p_*`` arrays): their values do not change a generic plan.
    arguments = ", ".join(
        "NULL" if name.startswith("p_") else ARGUMENTS[name] for name in compiled.positiontup or ()
    )
    conn = await asyncpg.connect(libpq_url(url), server_settings=WORKER_SESSION_SETTINGS)
    try:
        await conn.execute(f"PREPARE worker_statement AS {compiled.string}")
        explained = await conn.fetchval(
            f"EXPLAIN (FORMAT JSON) EXECUTE worker_statement({arguments})"
        )
    finally:
        await conn.close()
    plan: dict[str, Any] = json.loads(explained)[0]["Plan"]
    return plan


async def test_claims_on_a_worker_session_are_never_replanned_with_a_large_queue(
    large_queue: None, database_url: str, clock: Clock, transitions: Transitions
) -> None:
    engine = single_statements(
        create_engine(
            database_url, pool_size=1, server_settings=WORKER_SESSION_SETTINGS, pre_ping=False
        )
    )
    try:
        for _ in range(8):
            async with engine.connect() as conn:
                rows = await transitions.claim(
                    conn, worker_id="w-generic", handlers=[handler_key("atlas.noop", 1)], limit=16
                )
                assert len(rows) == 16
        async with engine.connect() as conn:
            [(generic, custom)] = (await conn.execute(PLANS, {"prefix": "%WITH lanes AS%"})).all()
    finally:
        await engine.dispose()
    assert (generic, custom) == (8, 0)


@pytest.mark.parametrize(
    ("statement", "index"),
    [
        (CLAIM, "ix_jobs_lanes"),
        (EXPIRED_LEASES, "ix_jobs_lease_expiry"),
        (EXPIRED_RESULTS, "ix_jobs_delivery_expiry"),
        (EXPIRED_WAITS, "ix_jobs_wait_deadline"),
        (PRUNE_FINISHED, "ix_jobs_prunable"),
    ],
    ids=["claim", "expired_leases", "expired_results", "expired_waits", "prune_finished"],
)
async def test_the_generic_plan_of_each_limited_worker_statement_walks_its_partial_index(
    large_queue: None, database_url: str, statement: TextClause, index: str
) -> None:
    plan = await _generic_plan(database_url, statement)
    nodes = list(_nodes(plan))
    # jobs is never scanned whole (the claim's small tables of lanes, keys and shares may be).
    kinds = {n["Node Type"] for n in nodes if n.get("Relation Name", "jobs") == "jobs"}
    assert not kinds & {"Seq Scan", "Bitmap Heap Scan", "Bitmap Index Scan"}, kinds
    # Limit -> LockRows -> Index Scan of the partial index, in its order: no Sort below
    # the Limit (the claim's final ORDER BY sorts only the <= LIMIT claimed rows; its
    # per-lane scan is the innermost such Limit).
    [limit, *_] = [
        n
        for n in reversed(nodes)
        if n["Node Type"] == "Limit" and any(d.get("Index Name") == index for d in _nodes(n))
    ]
    below = [(d["Node Type"], d.get("Index Name")) for d in _nodes(limit)]
    assert ("Index Scan", index) in below, below
    assert "Sort" not in {kind for kind, _ in below}, below


@pytest.mark.parametrize("name", [spec.name for spec in executed()], ids=str)
async def test_a_batched_move_finds_its_jobs_by_primary_key_only(
    large_queue: None, database_url: str, name: TransitionName
) -> None:
    """Every move the executor makes reaches its jobs through ``pk_jobs``, one probe per
    step: never through a partial index whose predicate its conditions imply (the
    leases', the waits'), which a bitmap scan would read whole, dead entries of finished
    jobs included, on every publication of a drain."""
    for full_rows in (True, False):
        plan = await _generic_plan(database_url, statement(name, full_rows=full_rows))
        scans = {
            (n["Node Type"], n.get("Index Name"))
            for n in _nodes(plan)
            if n.get("Relation Name") == "jobs" and n["Node Type"] != "ModifyTable"
        }
        assert scans == {("Index Scan", "pk_jobs")}, scans


# A pruned batch's history and attempts beside many more of other jobs, with statistics
# that count far fewer jobs than there are (as ANALYZE's sample did in a churn: ~530 for
# 125,000 history rows). With ``job_id = ANY(:job_ids)`` the generic plan then chose a
# sequential scan of job_history that tested each row against every id (470 ms a batch).
BULK_RECORDS = text("""
WITH made AS (
    SELECT gen_random_uuid() AS job_id FROM generate_series(1, :n)
), history AS (
    INSERT INTO job_history (job_id, transition, from_state, to_state, reason, actor)
    SELECT m.job_id, 'claim', 'queued', 'running', 'claimed', 'worker:bulk'
      FROM made AS m CROSS JOIN generate_series(1, 4)
)
INSERT INTO attempts (id, job_id, number, worker_id, lease_expires_at)
SELECT gen_random_uuid(), m.job_id, 1, 'w-bulk', now() FROM made AS m
""")
FEW_JOBS = ("job_history", "attempts")


async def test_the_pruners_records_are_found_by_their_jobs_keys(
    engine: AsyncEngine, database_url: str
) -> None:
    async with engine.begin() as conn:
        await conn.execute(BULK_RECORDS, {"n": 40_000})
        for table in FEW_JOBS:
            await conn.execute(
                text(f"ALTER TABLE {table} ALTER COLUMN job_id SET (n_distinct = 500)")
            )
            await conn.execute(text(f"ANALYZE {table}"))
    try:
        plan = await _generic_plan(database_url, PRUNE_RECORDS)
    finally:
        async with engine.begin() as conn:
            for table in FEW_JOBS:
                await conn.execute(
                    text(f"ALTER TABLE {table} ALTER COLUMN job_id RESET (n_distinct)")
                )
                await conn.execute(text(f"ANALYZE {table}"))
    scans = {
        (n["Relation Name"], n["Node Type"], n.get("Index Name"))
        for n in _nodes(plan)
        if n.get("Relation Name") in FEW_JOBS and n["Node Type"] != "ModifyTable"
    }
    assert scans == {
        ("job_history", "Index Scan", "pk_job_history"),
        ("job_history", "Tid Scan", None),
        ("attempts", "Index Scan", "uq_attempts_job_id_number"),
        ("attempts", "Tid Scan", None),
    }, scans
