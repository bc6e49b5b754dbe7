"""The pool's local claim queue (``ATLAS_WORKER_PREFETCH``), in process: real PostgreSQL,
the real claim loop, heartbeat, runner and completer, fake handlers and the test clock.

A job claimed ahead of a free slot is a held attempt: its lease is extended while it
waits, a cancel seen for it stops it before any work, a shutdown releases it uncharged,
and a pool whose last claim came back short takes nothing ahead of the others.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Iterable

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.transitions import Actor
from atlas_jobs._workers.context import JobContext
from atlas_jobs._workers.handlers.base import NO_FILES, Handler, PublishPlan
from atlas_jobs._workers.pool import WorkerPool
from atlas_jobs._workers.reaper import Reaper
from tests.sent_statements import CLAIM_PREFIX, record_claims, statements
from tests.workers.inprocess import KEY, LEASE, Harness, bounded, until

OWNER = Actor("client", "tester")


def _pool(
    settings: Settings,
    database_url: str,
    clock: Clock,
    handlers: dict[str, Handler],
    *,
    concurrency: int,
    prefetch: int | None = None,
    worker_id: str = "w-local",
) -> WorkerPool:
    return WorkerPool(
        settings,
        database_url=database_url,
        concurrency=concurrency,
        prefetch=prefetch,
        worker_id=worker_id,
        handlers=handlers,
        clock=clock,
    )


async def _states(harness: Harness, job_ids: Iterable[uuid.UUID]) -> list[str]:
    return [(await harness.row(job_id)).state for job_id in job_ids]


class Gate:
    """A handler that records what it ran and holds the first job until opened."""

    def __init__(self) -> None:
        self.ran: list[uuid.UUID] = []
        self.first_started = asyncio.Event()
        self.open = asyncio.Event()

    async def __call__(self, ctx: JobContext) -> PublishPlan:
        self.ran.append(ctx.job_id)
        self.first_started.set()
        await self.open.wait()
        await ctx.safe_point()
        return NO_FILES


async def _until_local(pool: WorkerPool, n: int) -> None:
    await until(lambda: asyncio.sleep(0, len(pool.slots.local)), lambda size: size == n)


async def test_prefetched_jobs_keep_their_leases_while_they_wait_and_run_once_each(
    harness: Harness, settings: Settings, database_url: str
) -> None:
    """Jobs wait locally three leases long: the heartbeat keeps them held, the reaper
    finds nothing to rescue, and each runs once, in one attempt."""
    job_ids = [await harness.create() for _ in range(3)]
    gate = Gate()
    pool = _pool(settings, database_url, harness.clock, {KEY: gate}, concurrency=1, prefetch=2)
    stop = asyncio.Event()
    task = asyncio.create_task(pool.run(stop))
    try:
        await bounded(gate.first_started.wait())
        await _until_local(pool, 2)  # the first claim filled: two more claimed ahead
        assert await _states(harness, job_ids) == ["running"] * 3
        for _ in range(3):  # three lease lengths pass in beats of two thirds of one
            harness.clock.advance(LEASE * 2 / 3)
            await bounded(pool.heartbeat.beat_once())
        assert await Reaper(harness.engine, harness.transitions).run_once() == 0
        assert len(pool.slots.local) == 2
        assert not any(c.lost for c in pool.slots.local.values())
        gate.open.set()
        await until(lambda: _states(harness, job_ids), lambda states: states == ["succeeded"] * 3)
    finally:
        stop.set()
        gate.open.set()
        await bounded(task)

    assert sorted(gate.ran) == sorted(job_ids)  # each ran exactly once
    assert pool.heartbeat.lost_while_alive == 0
    for job_id in job_ids:
        [attempt] = await harness.attempts(job_id)
        assert (attempt.worker_id, attempt.outcome) == ("w-local", "succeeded")
        assert [m[0] for m in await harness.moves(job_id)] == ["create", "claim", "publish"]


async def test_a_cancel_seen_for_a_locally_queued_job_stops_it_before_any_work(
    harness: Harness, settings: Settings, database_url: str
) -> None:
    job_ids = [await harness.create() for _ in range(3)]
    gate = Gate()
    pool = _pool(settings, database_url, harness.clock, {KEY: gate}, concurrency=1, prefetch=2)
    stop = asyncio.Event()
    task = asyncio.create_task(pool.run(stop))
    try:
        await bounded(gate.first_started.wait())
        await _until_local(pool, 2)
        waiting = next(iter(pool.slots.local))
        async with harness.engine.begin() as conn:
            await harness.transitions.request_cancel(conn, waiting, actor=OWNER)
        assert (await harness.row(waiting)).state == "cancel_requested"
        await bounded(pool.heartbeat.beat_once())  # the beat sees it: started into a cancel
        await until(lambda: harness.row(waiting), lambda row: row.state == "canceled")
        assert waiting not in gate.ran  # the handler never ran for it
        gate.open.set()
        others = [j for j in job_ids if j != waiting]
        await until(lambda: _states(harness, others), lambda states: states == ["succeeded"] * 2)
    finally:
        stop.set()
        gate.open.set()
        await bounded(task)

    assert waiting not in gate.ran
    [attempt] = await harness.attempts(waiting)
    assert attempt.outcome == "canceled"
    assert [m[:3] for m in await harness.moves(waiting)][-1] == (
        "stop_canceled",
        "cancel_requested",
        "canceled",
    )


async def test_a_locally_queued_job_whose_lease_is_lost_is_dropped_unstarted(
    harness: Harness, settings: Settings, database_url: str
) -> None:
    await harness.create()
    waiting_ids = [await harness.create() for _ in range(2)]
    gate = Gate()
    pool = _pool(settings, database_url, harness.clock, {KEY: gate}, concurrency=1, prefetch=2)
    stop = asyncio.Event()
    task = asyncio.create_task(pool.run(stop))
    try:
        await bounded(gate.first_started.wait())
        await _until_local(pool, 2)
        before = [await harness.snapshot(job_id) for job_id in waiting_ids]
        harness.clock.advance(LEASE + 1)  # no beat in time: every lease is gone
        await bounded(pool.heartbeat.beat_once())
        assert pool.slots.local == {}
        assert pool.heartbeat.lost_while_alive == 3
    finally:
        stop.set()
        gate.open.set()
        await bounded(task)

    assert [j for j in gate.ran if j in waiting_ids] == []  # never started
    # Nothing written by this process: the reaper rescues them as any lost lease.
    assert [await harness.snapshot(job_id) for job_id in waiting_ids] == before


async def test_shutdown_releases_unstarted_prefetched_jobs_uncharged_and_a_second_pool_runs_them(
    harness: Harness, settings: Settings, database_url: str
) -> None:
    job_ids = [await harness.create(max_attempts=1) for _ in range(3)]
    gate = Gate()
    pool = _pool(settings, database_url, harness.clock, {KEY: gate}, concurrency=1, prefetch=2)
    stop = asyncio.Event()
    task = asyncio.create_task(pool.run(stop))
    try:
        await bounded(gate.first_started.wait())
        await _until_local(pool, 2)
        waiting = list(pool.slots.local)
        stop.set()
        await until(lambda: asyncio.sleep(0, pool.slots.stopping), bool)  # the drain began
        gate.open.set()  # the running job reaches its safe point and is released too
    finally:
        stop.set()
        gate.open.set()
        await bounded(task)

    assert [j for j in gate.ran if j in waiting] == []  # never started
    for job_id in job_ids:
        row = await harness.row(job_id)
        assert (row.state, row.charged_attempts, row.worker_id) == ("queued", 0, None)
        [attempt] = await harness.attempts(job_id)
        assert (attempt.worker_id, attempt.outcome, attempt.charged) == ("w-local", "released", 0)
        assert (await harness.moves(job_id))[-1] == ("release", "running", "queued")

    # Nothing lost: another pool runs all three (max_attempts=1: none was charged).
    second = Gate()
    second.open.set()
    pool2 = _pool(
        settings, database_url, harness.clock, {KEY: second}, concurrency=2, worker_id="w-next"
    )
    stop2 = asyncio.Event()
    task2 = asyncio.create_task(pool2.run(stop2))
    try:
        await until(lambda: _states(harness, job_ids), lambda states: states == ["succeeded"] * 3)
    finally:
        stop2.set()
        await bounded(task2)
    assert sorted(second.ran) == sorted(job_ids)


async def test_a_pool_whose_claim_came_back_short_takes_nothing_ahead_of_the_others(
    harness: Harness, settings: Settings, database_url: str
) -> None:
    """No backlog, no prefetch: jobs that arrive while every slot of the first pool is
    busy stay in the shared queue for a pool with free slots."""
    gate = Gate()
    first = await harness.create()
    pool = _pool(settings, database_url, harness.clock, {KEY: gate}, concurrency=2, prefetch=4)
    stop = asyncio.Event()
    task = asyncio.create_task(pool.run(stop))
    other = Gate()
    other.open.set()
    pool2 = _pool(
        settings, database_url, harness.clock, {KEY: other}, concurrency=4, worker_id="w-other"
    )
    stop2 = asyncio.Event()
    task2: asyncio.Task[None] | None = None
    try:
        await bounded(gate.first_started.wait())  # claimed 1 of the 3 it asked for: short
        assert not pool.slots.busy
        assert pool.slots.local == {}
        second = await harness.create()
        await until(lambda: harness.row(second), lambda row: row.state == "running")
        # Both slots busy now; the claims after it found the queue empty.
        await until(lambda: asyncio.sleep(0, pool.slots.busy), lambda busy: not busy)
        later = [await harness.create() for _ in range(3)]
        task2 = asyncio.create_task(pool2.run(stop2))
        await until(lambda: _states(harness, later), lambda states: states == ["succeeded"] * 3)
        assert pool.slots.local == {}
        assert sorted(other.ran) == sorted(later)  # all went to the pool with free slots
        assert sorted(gate.ran) == sorted([first, second])
    finally:
        stop.set()
        stop2.set()
        gate.open.set()
        await bounded(task)
        if task2 is not None:
            await bounded(task2)


async def test_a_drain_sends_few_statements_per_job(
    harness: Harness, settings: Settings, database_url: str
) -> None:
    """Round trips of a drain of no-op jobs: each claim statement takes more jobs than
    the slots (prefetch), each group commit publishes several; a job costs well under
    one statement."""
    n, concurrency = 48, 4
    job_ids = [await harness.create() for _ in range(n)]

    async def noop(ctx: JobContext) -> PublishPlan:
        return NO_FILES

    pool = _pool(
        settings, database_url, harness.clock, {KEY: noop}, concurrency=concurrency, prefetch=12
    )
    with statements(pool.engine) as sent:
        stop = asyncio.Event()
        task = asyncio.create_task(pool.run(stop))
        try:
            await until(
                lambda: _states(harness, job_ids), lambda states: states == ["succeeded"] * n
            )
        finally:
            stop.set()
            await bounded(task)

    publications = [s for s in sent if "'publish'" in s]
    # The drain's claims: those sent before its last publication. After it the idle pool
    # polls once per poll interval until the test sees every job succeeded and stops it --
    # on a busy machine that takes a while, and those claims are not the jobs' cost.
    drained = max(i for i, s in enumerate(sent) if "'publish'" in s)
    claims = [s for s in sent[:drained] if s.startswith(CLAIM_PREFIX)]
    # Without prefetch a claim takes at most `concurrency` jobs: n / concurrency claims.
    # With 12 ahead a busy claim waits for half its batch of 16 to be free: claims of 8+
    # jobs (the first takes 4, the last finds the queue empty).
    assert len(claims) <= math.ceil((n - concurrency) / 8) + 2, len(claims)
    # Every publication is a group commit (one statement; history and attempts in it).
    assert 1 <= len(publications) <= n // 2, len(publications)
    assert all(s.startswith("WITH input AS") for s in publications)


async def test_a_job_arriving_alone_costs_one_claim_not_a_second_empty_one(
    harness: Harness, settings: Settings, database_url: str
) -> None:
    """One job for one free slot proves no backlog: the pool does not turn prefetching on
    and claim again at once (that claim would find the queue empty -- one wasted
    statement per job when jobs arrive one at a time). Only a claim that brings back
    more jobs than the free slots does."""
    gate = Gate()
    first = await harness.create()
    pool = _pool(settings, database_url, harness.clock, {KEY: gate}, concurrency=1, prefetch=4)
    claims = record_claims(pool.engine)
    stop = asyncio.Event()
    task = asyncio.create_task(pool.run(stop))
    try:
        await bounded(gate.first_started.wait())
        await asyncio.sleep(5 * settings.poll_interval_seconds)  # polls would claim here
        assert len(claims) == 1, len(claims)  # the slot is busy; nothing more to claim
        assert not pool.slots.busy
        assert pool.slots.local == {}
        # A backlog: the next claim brings back more than the free slot, and prefetches.
        backlog = [await harness.create() for _ in range(6)]
        gate.open.set()
        await until(
            lambda: _states(harness, [first, *backlog]),
            lambda states: states == ["succeeded"] * 7,
        )
        assert len(claims) < 7  # fewer claims than jobs: the backlog was prefetched
    finally:
        stop.set()
        gate.open.set()
        await bounded(task)
