"""Pickup of one owner's job behind another owner's backlog, against an empty queue.

``python -m benchmarks.fair_pickup``: on a throwaway database, a claimer loop claims
batches of ``BENCH_FAIR_LIMIT`` (16) through the real claim statement, as fast as it
can, the way a busy worker pool does. ``BENCH_FAIR_SAMPLES`` (200) times, a job of owner
``small`` is created and the time until a claim returns it is recorded (its pickup).
Twice: with an empty queue, and with ``BENCH_FAIR_BACKLOG`` (100,000) queued jobs of
owner ``big`` (the run claims a few thousand of them: no top-up needed). Ratio: p99
behind the backlog / p99 on the empty queue. Prints one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from typing import Any

from sqlalchemy import text

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.engine import (
    WORKER_SESSION_SETTINGS,
    create_engine,
    normalize_url,
    resolve_database_url,
    single_statements,
)
from atlas_jobs._app.kinds import handler_key
from atlas_jobs._app.lifecycle import ActorKind
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.transitions import Actor, NewJob, Transitions
from benchmarks.loadgen import percentile
from benchmarks.suite import scratch_database

KIND = "atlas.noop"
FILL = text("""
INSERT INTO jobs (owner, kind, kind_version, input, state, reason, max_attempts,
                  max_elapsed_seconds)
SELECT 'big', 'atlas.noop', 1, '{}'::jsonb, 'queued', 'new', 3, 600
  FROM generate_series(1, :n)
""")


def job(owner: str) -> NewJob:
    return NewJob(
        owner=owner, kind=KIND, kind_version=1, input={}, max_attempts=3, max_elapsed_seconds=600
    )


async def pickups(url: str, backlog: int, samples: int, limit: int) -> list[float]:
    engine = single_statements(
        create_engine(url, pool_size=2, server_settings=WORKER_SESSION_SETTINGS, pre_ping=False)
    )
    producer = create_engine(url, pool_size=1)
    transitions = Transitions(Clock(), lease_seconds=60)
    handlers = [handler_key(KIND, 1)]
    found: dict[uuid.UUID, float] = {}
    arrived = asyncio.Event()
    stop = asyncio.Event()

    async def claimer() -> None:
        while not stop.is_set():
            async with engine.connect() as conn:
                claimed = await transitions.claim_to_run(
                    conn, worker_id="bench", handlers=handlers, limit=limit
                )
            now = time.perf_counter()
            for job in claimed:
                found.setdefault(job.job_id, now)
            arrived.set()  # every claim: the waiter looks again
            if not claimed:
                await asyncio.sleep(0.001)

    try:
        if backlog:
            async with producer.begin() as conn:
                await conn.execute(FILL, {"n": backlog})
                await conn.execute(text("ANALYZE jobs"))
        task = asyncio.create_task(claimer())
        timings: list[float] = []
        for _ in range(samples):
            async with producer.begin() as conn:
                [created] = await transitions.create_many(
                    conn, [job("small")], actor=Actor(ActorKind.CLIENT, "small")
                )
            t0 = time.perf_counter()
            while created.job.id not in found:
                arrived.clear()
                await arrived.wait()
            timings.append((found[created.job.id] - t0) * 1000.0)
            await asyncio.sleep(0.02)
        stop.set()
        await task
        return timings
    finally:
        await engine.dispose()
        await producer.dispose()


async def run() -> dict[str, Any]:
    explicit = os.environ.get("DATABASE_URL")
    base = normalize_url(explicit) if explicit else resolve_database_url(Settings())
    return await measure(
        base,
        samples=int(os.environ.get("BENCH_FAIR_SAMPLES", "200")),
        limit=int(os.environ.get("BENCH_FAIR_LIMIT", "16")),
        backlog=int(os.environ.get("BENCH_FAIR_BACKLOG", "100000")),
    )


async def measure(base: str, *, samples: int, limit: int, backlog: int) -> dict[str, Any]:
    """Pickup p50/p99 on an empty queue and behind ``backlog`` jobs of another owner, on
    two scratch databases of the server ``base`` names; ``p99_ratio`` = behind / empty."""
    result: dict[str, Any] = {"samples": samples, "limit": limit, "backlog": backlog}
    for name, size in (("empty", 0), ("behind", backlog)):
        database = f"atlas_bench_fair_{name}_{uuid.uuid4().hex[:6]}"
        async with scratch_database(base, database, keep=False) as url:
            timings = await pickups(url, size, samples, limit)
        result[name] = {
            "p50_ms": round(percentile(timings, 50) or 0.0, 2),
            "p99_ms": round(percentile(timings, 99) or 0.0, 2),
        }
    result["p99_ratio"] = round(result["behind"]["p99_ms"] / result["empty"]["p99_ms"], 2)
    return result


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run())))
