"""Claiming: many processes, one database -- each job runs once per attempt, and the
claim query walks the partial index however many jobs are queued."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.engine import WORKER_SESSION_SETTINGS, create_engine, single_statements
from atlas_jobs._app.db.queries import CLAIM
from atlas_jobs._app.db.records import ClaimedJob
from atlas_jobs._app.db.schema import attempts, job_history, jobs
from atlas_jobs._app.kinds import handler_key
from atlas_jobs._app.lifecycle import JobState
from atlas_jobs._app.transitions import Transitions
from tests.workers.bulk import BULK_QUEUED
from tests.workers.conftest import MakeFleet
from tests.workers.dbwait import eventually, wait_all_terminal
from tests.workers.inprocess import listening_workers


def _plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes.extend(_plan_nodes(child))
    return nodes


async def test_claim_query_uses_the_partial_index_with_50000_queued_jobs(
    engine: AsyncEngine,
) -> None:
    async with engine.begin() as conn:
        await conn.execute(BULK_QUEUED, {"kind": "atlas.noop", "n": 50_000})
        await conn.execute(text("ANALYZE jobs"))
    async with engine.connect() as conn:
        explained = (
            await conn.execute(
                text("EXPLAIN (FORMAT JSON) " + CLAIM.text),
                {
                    "worker_id": "w-explain",
                    "actor": "worker:w-explain",
                    "handlers": [handler_key("atlas.noop", 1)],
                    "limit": 10,
                    "lease_seconds": 30.0,
                    "clock_offset": 0.0,
                },
            )
        ).scalar_one()
    plan = (json.loads(explained) if isinstance(explained, str) else explained)[0]["Plan"]
    nodes = _plan_nodes(plan)
    scans_of_jobs = [n for n in nodes if n.get("Relation Name") == "jobs"]
    assert not [n for n in scans_of_jobs if n["Node Type"] == "Seq Scan"], nodes
    assert any(n.get("Index Name") == "ix_jobs_lanes" for n in scans_of_jobs), nodes


async def test_claim_walks_the_index_in_order_on_a_worker_session_even_with_stale_stats(
    database_url: str, engine: AsyncEngine
) -> None:
    """Right after a bulk enqueue (no ANALYZE yet) the plan a worker session runs is an
    ordered walk of ix_jobs_lanes per lane that stops after LIMIT rows -- not a bitmap scan of
    every index entry followed by a sort (see WORKER_SESSION_SETTINGS)."""
    async with engine.begin() as conn:
        await conn.execute(BULK_QUEUED, {"kind": "atlas.noop", "n": 20_000})
    worker_engine = create_engine(database_url, server_settings=WORKER_SESSION_SETTINGS)
    try:
        async with worker_engine.connect() as conn:
            explained = (
                await conn.execute(
                    text("EXPLAIN (FORMAT JSON) " + CLAIM.text),
                    {
                        "worker_id": "w-explain",
                        "actor": "worker:w-explain",
                        "handlers": [handler_key("atlas.noop", 1)],
                        "limit": 16,
                        "lease_seconds": 30.0,
                        "clock_offset": 0.0,
                    },
                )
            ).scalar_one()
    finally:
        await worker_engine.dispose()
    plan = (json.loads(explained) if isinstance(explained, str) else explained)[0]["Plan"]
    nodes = _plan_nodes(plan)
    kinds = {n["Node Type"] for n in nodes if n.get("Relation Name", "jobs") == "jobs"}
    assert not kinds & {"Seq Scan", "Bitmap Heap Scan", "Bitmap Index Scan"}, kinds
    # The per-lane picking subtree: Limit -> LockRows -> Index Scan, with no Sort in
    # between (the only Sort allowed is the final ORDER BY over the <= LIMIT claimed rows).
    [picking, *_] = [
        n
        for n in reversed(nodes)
        if n["Node Type"] == "Limit"
        and any(d.get("Index Name") == "ix_jobs_lanes" for d in _plan_nodes(n))
    ]
    below = [d["Node Type"] for d in _plan_nodes(picking)]
    assert "Sort" not in below, below
    assert "Index Scan" in below, below


@pytest.mark.slow
async def test_the_pools_claim_answers_the_attempts_facts_in_the_order_it_reads_them(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    """The pool reads its claim's rows by position (ClaimedJob.from_claim), as the
    driver answers them: they give the same facts the job's full row gives after the
    claim."""
    async with engine.begin() as conn:
        await conn.execute(BULK_QUEUED, {"kind": "atlas.noop", "n": 2})
    async with single_statements(engine).connect() as conn:
        claimed = await transitions.claim_to_run(
            conn, worker_id="w-lean", handlers=[handler_key("atlas.noop", 1)], limit=2
        )
    assert len(claimed) == 2
    for job in claimed:
        async with engine.connect() as conn:
            full = (await conn.execute(select(jobs).where(jobs.c.id == job.job_id))).one()
        assert job == ClaimedJob.from_row(full)
        assert full.state == JobState.RUNNING.value


async def test_the_pools_claim_runs_on_autocommit_connections_only(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    """Sent straight to the driver, the claim is its own transaction: inside one that
    SQLAlchemy has begun it would not be part of it, so it is refused there."""
    async with engine.begin() as conn:
        with pytest.raises(ValueError, match="autocommit"):
            await transitions.claim_to_run(
                conn, worker_id="w-tx", handlers=[handler_key("atlas.noop", 1)], limit=1
            )


async def test_four_processes_run_2000_noop_jobs_each_exactly_once(
    engine: AsyncEngine, make_fleet: MakeFleet
) -> None:
    fleet = make_fleet(lease_seconds=10.0, poll_interval_seconds=0.5)
    names = [f"w{n}" for n in range(4)]
    for name in names:
        fleet.start(name, concurrency=8)

    await eventually(
        lambda: listening_workers(engine), lambda n: n == 4, timeout=60, what="4 listening workers"
    )
    async with engine.begin() as conn:
        await conn.execute(BULK_QUEUED, {"kind": "atlas.noop", "n": 2000})

    counts = await wait_all_terminal(engine, timeout=180)
    assert counts == {JobState.SUCCEEDED.value: 2000}, fleet.logs()

    async with engine.connect() as conn:
        published = _pairs(
            await conn.execute(
                select(job_history.c.job_id, func.count())
                .where(job_history.c.transition == "publish")
                .group_by(job_history.c.job_id)
            )
        )
        tries = (
            await conn.execute(
                select(
                    attempts.c.job_id,
                    attempts.c.number,
                    attempts.c.worker_id,
                    attempts.c.outcome,
                    attempts.c.claimed_at,
                    attempts.c.ended_at,
                ).order_by(attempts.c.job_id, attempts.c.number)
            )
        ).all()
        finished = (await conn.execute(select(func.count()).select_from(jobs))).scalar_one()
    assert finished == 2000
    assert len(published) == 2000
    assert set(published.values()) == {1}

    by_job: dict[Any, list[Any]] = defaultdict(list)
    for attempt in tries:
        by_job[attempt.job_id].append(attempt)
    assert len(by_job) == 2000
    for job_attempts in by_job.values():
        assert [a.outcome for a in job_attempts].count("succeeded") == 1
        for earlier, later in itertools.pairwise(job_attempts):
            assert earlier.ended_at is not None
            assert earlier.ended_at <= later.claimed_at  # attempts never overlap
    workers_used = {a.worker_id for a in tries}
    assert workers_used <= set(names)
    assert len(workers_used) >= 2, "the work was shared between processes"


def _pairs(rows: Any) -> dict[Any, int]:
    return {key: count for key, count in rows}


async def test_new_work_wakes_an_idle_worker_and_a_lost_notification_only_delays_it(
    engine: AsyncEngine, make_fleet: MakeFleet
) -> None:
    """LISTEN/NOTIFY wakes an idle worker: with a 60 s poll interval, only the
    notification can start the job within the 30 s we wait. With the notification lost
    (the trigger disabled for one insert), a worker's polling fallback still runs it."""

    async def succeeded() -> int:
        async with engine.connect() as conn:
            return int(
                (
                    await conn.execute(
                        select(func.count()).where(jobs.c.state == JobState.SUCCEEDED.value)
                    )
                ).scalar_one()
            )

    notified = make_fleet(poll_interval_seconds=60.0)
    listener = notified.start("notified", concurrency=2)
    await eventually(
        lambda: listening_workers(engine), lambda n: n == 1, timeout=60, what="a listening worker"
    )
    async with engine.begin() as conn:  # announced: the trigger notifies atlas_work
        await conn.execute(BULK_QUEUED, {"kind": "atlas.noop", "n": 1})
    await eventually(succeeded, lambda n: n == 1, timeout=30, what="the announced job")
    listener.terminate()

    polling = make_fleet(poll_interval_seconds=1.0)
    polling.start("polling", concurrency=2)
    await eventually(
        lambda: listening_workers(engine), lambda n: n == 1, timeout=60, what="the polling worker"
    )
    async with engine.begin() as conn:  # silent: this insert sends no notification
        await conn.execute(text("ALTER TABLE jobs DISABLE TRIGGER jobs_inserted"))
        await conn.execute(BULK_QUEUED, {"kind": "atlas.noop", "n": 1})
        await conn.execute(text("ALTER TABLE jobs ENABLE TRIGGER jobs_inserted"))
        await conn.execute(RECOUNT_BULK)  # what the disabled trigger also does
    await eventually(succeeded, lambda n: n == 2, timeout=30, what="the unannounced job")
    assert await _publishers(engine) == {"worker:notified", "worker:polling"}


RECOUNT_BULK = text("""
INSERT INTO owner_backlog AS b (owner, slot, unfinished)
VALUES ('bulk', (pg_backend_pid() & 15)::smallint, 1)
    ON CONFLICT (owner, slot) DO UPDATE SET unfinished = b.unfinished + EXCLUDED.unfinished
""")
"""What the disabled insert trigger would have done for the one queued job of the ``bulk``
owner: count it on this connection's row (revision f2a3b4c5d6e7)."""


async def _publishers(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(job_history.c.actor).where(job_history.c.transition == "publish")
        )
        return {actor for (actor,) in rows}
