"""Bulk operations run by real worker processes: a worker killed (kill -9) halfway
through an operation, whose lease another worker takes over -- the operation completes
and no job is acted on twice -- and two operations over the same jobs at once, each job
acted on by one of them, the other counting it skipped, neither failing."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import SYSTEM_CLOCK
from atlas_jobs._app.db import bulk
from atlas_jobs._app.db.reads import JobFilter
from tests.workers.bulk import BULK_UNRESOLVED
from tests.workers.procs import Fleet, WorkerSettings

BULK_LEASE = 2.0


def bulk_fleet(database_url: str, data_dir: Path, batch_size: int) -> Fleet:
    return Fleet(
        database_url,
        data_dir,
        WorkerSettings(),
        extra_env={
            "ATLAS_BULK_BATCH_SIZE": str(batch_size),
            "ATLAS_BULK_LEASE_SECONDS": str(BULK_LEASE),
            "ATLAS_BULK_INTERVAL_SECONDS": "0.1",
        },
    )


async def seed(engine: AsyncEngine, n: int, tag: str, kind: str = "test.unserved") -> None:
    async with engine.begin() as conn:
        await conn.execute(BULK_UNRESOLVED, {"n": n, "kind": kind, "tag": tag})


async def accept(engine: AsyncEngine, action: str, tag: str) -> uuid.UUID:
    async with engine.begin() as conn:
        row = await bulk.accept(
            conn,
            action=action,
            page=JobFilter(owner=None, tags=[tag]),
            job_ids=None,
            note=None,
            requested_by="operator:ops",
            key_id=None,
            kinds=None,
            clock_params=SYSTEM_CLOCK.bind(),
        )
    return row.id


async def operation(engine: AsyncEngine, operation_id: uuid.UUID) -> Any:
    async with engine.connect() as conn:
        return await bulk.get(conn, operation_id)


async def wait_ended(
    engine: AsyncEngine, operation_id: uuid.UUID, fleet: Fleet, timeout: float
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = await operation(engine, operation_id)
        if row.state in ("succeeded", "failed", "canceled"):
            return row
        await asyncio.sleep(0.1)
    raise AssertionError(f"operation still {row.state} ({row.done} done)\n{fleet.logs()}")


async def moves_per_job(engine: AsyncEngine, transitions: tuple[str, ...]) -> dict[uuid.UUID, int]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT j.id, count(h.seq) AS moves FROM jobs AS j"
                " LEFT JOIN job_history AS h ON h.job_id = j.id"
                "  AND h.transition = ANY(CAST(:names AS text[]))"
                " GROUP BY j.id"
            ),
            {"names": list(transitions)},
        )
        return {row.id: row.moves for row in rows}


@pytest.mark.slow
async def test_a_worker_killed_halfway_leaves_the_operation_to_another_and_no_job_twice(
    engine: AsyncEngine, database_url: str, data_dir: Path
) -> None:
    n = 3000
    await seed(engine, n, "dest=down")
    operation_id = await accept(engine, "resume", "dest=down")
    fleet = bulk_fleet(database_url, data_dir, batch_size=25)
    try:
        doomed = fleet.start("doomed", concurrency=1)
        deadline = time.monotonic() + 60
        while True:  # kill it while the operation is well under way, mid-batch or not
            row = await operation(engine, operation_id)
            if row.done >= n // 4 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.01)
        assert row.state == "running", row.state
        assert row.done < n
        doomed.kill()
        halfway = await operation(engine, operation_id)
        assert halfway.state == "running"
        assert 0 < halfway.done < n
        fleet.start("heir", concurrency=1)
        ended = await wait_ended(engine, operation_id, fleet, timeout=90)
        assert ended.state == "succeeded"
        assert (ended.matched, ended.done, ended.skipped) == (n, n, {})
        assert ended.worker_id is None
        moves = await moves_per_job(engine, ("resume",))
        assert sorted(set(moves.values())) == [1]  # every job resumed, none twice
        assert len(moves) == n
    finally:
        fleet.close()


@pytest.mark.slow
async def test_two_operations_over_the_same_jobs_act_on_each_job_once(
    engine: AsyncEngine, database_url: str, data_dir: Path
) -> None:
    n = 1500
    await seed(engine, n, "dest=down")
    resume = await accept(engine, "resume", "dest=down")
    fail = await accept(engine, "fail", "dest=down")
    fleet = bulk_fleet(database_url, data_dir, batch_size=50)
    try:
        fleet.start("one", concurrency=1)
        fleet.start("two", concurrency=1)
        resumed = await wait_ended(engine, resume, fleet, timeout=90)
        failed = await wait_ended(engine, fail, fleet, timeout=90)
        assert resumed.state == failed.state == "succeeded"
        assert {resumed.worker_id, failed.worker_id} == {None}
        assert resumed.matched == failed.matched == n
        assert resumed.done + failed.done == n
        assert resumed.done + sum(resumed.skipped.values()) == n
        assert failed.done + sum(failed.skipped.values()) == n
        # what one did, the other saw in its new state: queued, or ended
        assert set(resumed.skipped) <= {"already_ended"}
        assert set(failed.skipped) <= {"not_allowed_in_state:queued"}
        moves = await moves_per_job(engine, ("resume", "operator_fail"))
        assert sorted(set(moves.values())) == [1]
        started = await moves_per_job(engine, ("resume",))
        assert sum(started.values()) == resumed.done
    finally:
        fleet.close()
