"""Wake-ups without a thundering herd: every idle worker process LISTENs on
``atlas_work``, so every notification wakes them all; the claim cooldown
(``ATLAS_CLAIM_COOLDOWN_SECONDS``, :class:`atlas_jobs._workers.wakeup.ClaimCooldown`) keeps the
processes that lost the race from claiming once per job.

Real PostgreSQL, real :class:`~atlas_jobs._workers.pool.WorkerPool` objects (each with its own
engine and LISTEN connection) on the test's event loop; claims are counted as the
statements the pools send, never timed.
"""

from __future__ import annotations

import asyncio
import uuid

from atlas_jobs._app.settings import Settings
from atlas_jobs._app.transitions import NewJob
from atlas_jobs._workers.context import JobContext
from atlas_jobs._workers.handlers.base import NO_FILES, PublishPlan
from atlas_jobs._workers.pool import WorkerPool
from tests.sent_statements import record_claims
from tests.workers.inprocess import (
    CLIENT,
    KEY,
    KIND,
    Harness,
    bounded,
    listening_workers,
    until,
)

PROCESSES = 4
JOBS = 12


def _pool(settings: Settings, database_url: str, harness: Harness, name: str) -> WorkerPool:
    async def handler(_ctx: JobContext) -> PublishPlan:
        return NO_FILES

    return WorkerPool(
        settings,
        database_url=database_url,
        concurrency=1,
        worker_id=name,
        handlers={KEY: handler},
        clock=harness.clock,
    )


async def _succeeded(harness: Harness, job_id: uuid.UUID) -> bool:
    return bool((await harness.row(job_id)).state == "succeeded")


async def _idle(harness: Harness, pools: int, claims: list[list[str]]) -> None:
    """Every pool listens and has sent its first claim (the one its LISTEN connection's
    start asks for); then a moment for any claim still in flight."""
    await until(lambda: listening_workers(harness.engine), lambda n: n == pools)
    await until(lambda: asyncio.sleep(0, claims), lambda c: all(c))
    await asyncio.sleep(0.2)


async def test_idle_processes_send_a_bounded_number_of_claims_per_job(
    harness: Harness, settings: Settings, database_url: str
) -> None:
    """Four idle pools, jobs created one at a time (each after the previous one ran):
    without the cooldown every notification makes all four claim (4 claims per job,
    3 of them empty); with it the pools that lost the first job's race coalesce what
    follows while the winner claims each job at once -- about one claim per job, and
    all jobs run. (Polling every 60 s: every claim here is a notification's.)"""
    quiet = settings.model_copy(
        update={"poll_interval_seconds": 60.0, "claim_cooldown_seconds": 5.0}
    )
    pools = [_pool(quiet, database_url, harness, f"w-herd-{i}") for i in range(PROCESSES)]
    claims = [record_claims(pool.engine) for pool in pools]
    stop = asyncio.Event()
    tasks = [asyncio.create_task(pool.run(stop)) for pool in pools]
    try:
        await _idle(harness, PROCESSES, claims)
        before = sum(len(c) for c in claims)
        for _ in range(JOBS):
            job_id = await harness.create()
            await until(lambda: _succeeded(harness, job_id), bool)  # noqa: B023
        sent = sum(len(c) for c in claims) - before
        # The first job wakes all four (three lose the race and cool down); the later
        # ones are claimed by the winner alone. Without the cooldown: PROCESSES * JOBS.
        assert JOBS <= sent <= 2 * JOBS, f"{sent} claims for {JOBS} jobs"
    finally:
        stop.set()
        await bounded(asyncio.gather(*tasks))


async def test_a_job_announced_during_a_cooldown_is_claimed_at_its_end(
    harness: Harness, settings: Settings, database_url: str
) -> None:
    """A pool that lost a race (another worker took the announced job first) cools
    down; a job created in that window is not stranded until the poll (60 s, beyond
    this test's bound): its notification is coalesced into ONE claim at the window's
    end, which runs it."""
    quiet = settings.model_copy(
        update={"poll_interval_seconds": 60.0, "claim_cooldown_seconds": 2.0}
    )
    ran: list[uuid.UUID] = []

    async def handler(ctx: JobContext) -> PublishPlan:
        ran.append(ctx.job_id)
        return NO_FILES

    pool = WorkerPool(
        quiet,
        database_url=database_url,
        concurrency=1,
        worker_id="w-cooling",
        handlers={KEY: handler},
        clock=harness.clock,
    )
    claims = record_claims(pool.engine)
    stop = asyncio.Event()
    task = asyncio.create_task(pool.run(stop))
    try:
        await _idle(harness, 1, [claims])
        idle = len(claims)
        # A rival worker creates and claims a job in one transaction: its notification
        # reaches the pool when the job is already taken -- the pool's claim finds nothing.
        async with harness.engine.begin() as conn:
            taken = await harness.transitions.create(
                conn,
                NewJob(
                    owner="alice",
                    kind=KIND,
                    kind_version=1,
                    input={"n": 0},
                    max_attempts=3,
                    max_elapsed_seconds=3600,
                ),
                actor=CLIENT,
            )
            [row] = await harness.transitions.claim(
                conn, worker_id="w-rival", handlers=[KEY], limit=1
            )
            assert row.id == taken.job.id
        await until(lambda: asyncio.sleep(0, len(claims)), lambda n: n == idle + 1)
        await until(lambda: asyncio.sleep(0, pool.claimer.cooldown.remaining()), bool)
        job_id = await harness.create()  # announced inside the window
        await until(lambda: _succeeded(harness, job_id), bool)
        assert ran == [job_id]
        # The lost race's claim, then one claim at the window's end: no claim per
        # notification inside the window, no second claim after it.
        assert len(claims) == idle + 2
    finally:
        stop.set()
        await bounded(task)


async def test_a_pool_that_keeps_finding_jobs_never_cools_down(
    harness: Harness, settings: Settings, database_url: str
) -> None:
    """A lone pool (the fleet's winner) claims every announced job on its notification:
    one claim per job and no window ever opens (a cooldown of 60 s would strand the
    jobs beyond this test's bound if one did)."""
    quiet = settings.model_copy(
        update={"poll_interval_seconds": 60.0, "claim_cooldown_seconds": 60.0}
    )
    pool = _pool(quiet, database_url, harness, "w-winner")
    claims = record_claims(pool.engine)
    stop = asyncio.Event()
    task = asyncio.create_task(pool.run(stop))
    try:
        await _idle(harness, 1, [claims])
        idle = len(claims)
        for _ in range(5):
            job_id = await harness.create()
            await until(lambda: _succeeded(harness, job_id), bool)  # noqa: B023
            assert pool.claimer.cooldown.remaining() == 0
        assert len(claims) == idle + 5
    finally:
        stop.set()
        await bounded(task)
