"""``make bench`` section ``charts``: what the operators' charts cost at 1,000,000 jobs.

On a throwaway database: ``jobs`` filled to ``BENCH_CHARTS_JOBS`` queued rows (the claim
section's filler), ``job_history`` with ``BENCH_CHARTS_HISTORY`` old rows spread over two
days in time order (as a history is appended), and ``job_activity`` holding two days of
minutes for five kinds; then ``VACUUM ANALYZE`` (which summarizes the BRIN index); then,
just before the timings, one creation row for each of the newest ``BENCH_CHARTS_RECENT``
jobs within the last minute (a busy minute: what each rollup pass recounts). Timed, each
``BENCH_CHARTS_REPEATS`` times on one connection, the median kept:

* a plain primary-key read of one job (``SELECT * FROM jobs WHERE id = ...``): the unit;
* the chart query of the last hour (60 x 1 minute) and of the last day (60 x 24 minutes)
  (:func:`atlas_jobs._app.db.activity.chart`);
* the two statements of a rollup pass, each rolled back: the recount of the last minutes
  from the history (``ROLL_UP_MOVES``; every pass) and the queue sample (``ROLL_UP_QUEUE``):
  as the minute's first pass, which reads every claimable queued job (all the filler
  here, the worst case), and as a later pass of the minute, which skips it.

Ratios: each median / the primary-key read's.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import activity
from atlas_jobs._app.db.engine import create_engine, libpq_url
from atlas_jobs._app.settings import Settings

OLD_HISTORY = text("""
INSERT INTO job_history (job_id, at, transition, from_state, to_state, reason, actor)
SELECT gen_random_uuid(), now() - interval '2 days' + (g * interval '2 days') / :n,
       'create', NULL, 'queued', 'new', 'client:bench'
  FROM generate_series(1, :n) AS g
""")
RECENT_HISTORY = text("""
INSERT INTO job_history (job_id, at, transition, from_state, to_state, reason, actor)
SELECT id, now() - interval '50 seconds' * random(), 'create', NULL, 'queued', 'new',
       'client:bench'
  FROM (SELECT id FROM jobs ORDER BY seq DESC LIMIT :n) AS newest
""")
ACTIVITY = text("""
INSERT INTO job_activity (minute, kind, created, succeeded, failed, canceled, queued,
                          oldest_queued_seconds)
SELECT date_trunc('minute', now()) - make_interval(mins => m), 'bench.kind' || k,
       100 + (m % 7), 90, 3, 1, 40, 12.5
  FROM generate_series(0, 2879) AS m, generate_series(1, 5) AS k
""")
PK_READ = text("SELECT * FROM jobs WHERE id = :id")


async def _median_ms(repeats: int, call: Callable[[], Awaitable[Any]]) -> float:
    for _ in range(max(2, repeats // 10)):  # warm-up: plans cached, pages in memory
        await call()
    timings = []
    for _ in range(repeats):
        t = time.perf_counter()
        await call()
        timings.append((time.perf_counter() - t) * 1000.0)
    return statistics.median(timings)


CURRENT_MINUTE_UNSAMPLED = text(
    "DELETE FROM job_activity WHERE minute = date_trunc('minute', now())"
)


async def _rolled_back(
    conn: AsyncConnection, statement: Any, params: dict[str, Any], *, fresh_minute: bool = False
) -> None:
    """``statement`` in a transaction rolled back; with ``fresh_minute``, as the first pass
    of a minute (no sample yet: the queue sample runs)."""
    async with conn.begin() as tx:
        if fresh_minute:
            await conn.execute(CURRENT_MINUTE_UNSAMPLED)
        await conn.execute(statement, params)
        await tx.rollback()


async def measure(url: str, *, repeats: int, recent: int) -> dict[str, Any]:
    """The timings on a filled database (see the module's docstring)."""
    engine = create_engine(url, pool_size=1, application_name="atlas-bench-charts")
    clock = Clock()
    try:
        async with engine.connect() as conn:
            await conn.commit()
            one = (await conn.execute(text("SELECT id FROM jobs ORDER BY seq LIMIT 1"))).one()
            await conn.commit()

            async def pk_read() -> None:
                (await conn.execute(PK_READ, {"id": one.id})).one()
                await conn.commit()

            async def chart(minutes: int, bucket: int) -> None:
                await activity.chart(conn, clock, window_minutes=minutes, bucket_minutes=bucket)
                await conn.commit()

            # The busy minute, written now: the recount's window is the last minute or two.
            await conn.execute(RECENT_HISTORY, {"n": recent})
            await conn.commit()
            results = {
                "pk_read_ms": await _median_ms(repeats, pk_read),
                "chart_hour_ms": await _median_ms(repeats, lambda: chart(60, 1)),
                "chart_day_ms": await _median_ms(repeats, lambda: chart(1440, 24)),
                "rollup_moves_ms": await _median_ms(
                    max(5, repeats // 5),
                    lambda: _rolled_back(conn, activity.ROLL_UP_MOVES, clock.bind()),
                ),
                "rollup_queue_ms": await _median_ms(
                    max(5, repeats // 5),
                    lambda: _rolled_back(
                        conn, activity.ROLL_UP_QUEUE, clock.bind(), fresh_minute=True
                    ),
                ),
                "rollup_queue_sampled_ms": await _median_ms(
                    max(5, repeats // 5),
                    lambda: _rolled_back(conn, activity.ROLL_UP_QUEUE, clock.bind()),
                ),
            }
            counts = (
                await conn.execute(
                    text(
                        "SELECT (SELECT count(*) FROM jobs) AS jobs, "
                        "(SELECT count(*) FROM job_history) AS history, "
                        "(SELECT count(*) FROM job_activity) AS activity"
                    )
                )
            ).one()
            await conn.commit()
    finally:
        await engine.dispose()
    unit = results["pk_read_ms"]
    return {
        **{k: round(v, 3) for k, v in results.items()},
        "ratios": {k.removesuffix("_ms"): round(v / unit, 1) for k, v in results.items()},
        "jobs": int(counts.jobs),
        "history_rows": int(counts.history),
        "activity_rows": int(counts.activity),
        "repeats": repeats,
    }


async def fill(url: str, *, jobs: int, history: int) -> float:
    """Fill the database as the module's docstring says; seconds it took."""
    from benchmarks.peer_adapter import Atlas
    from benchmarks.suite import fill_queue

    t0 = time.perf_counter()
    producer = Atlas(url, Settings(DATABASE_URL=url))
    try:
        await producer.enqueue_many([0])
        async with producer.engine.connect() as conn:
            await fill_queue(conn, jobs, None, 0.0)
            await conn.execute(OLD_HISTORY, {"n": history})
            await conn.execute(ACTIVITY)
            await conn.commit()
    finally:
        await producer.close()
    raw = await asyncpg.connect(libpq_url(url))
    try:
        await raw.execute("VACUUM ANALYZE")
    finally:
        await raw.close()
    return time.perf_counter() - t0
