""":class:`~atlas_jobs._workers.pool.WorkerPool` in process: the claim loop, drain and heartbeat
with a fake handler registry and the test clock. ``run(stop)`` runs as a task on the test's event
loop; the pool owns (and disposes) its engine.

What only a real process shows -- SIGTERM handling, exit codes, kill -9 -- stays in
``test_shutdown`` and ``test_crashes``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable
from typing import Any

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.settings import Settings
from atlas_jobs._workers.context import JobContext
from atlas_jobs._workers.handlers.base import NO_FILES, Handler, PublishPlan
from atlas_jobs._workers.pool import WorkerPool
from tests.sent_statements import CLAIM_PREFIX, record_claims, record_round_trips
from tests.workers.inprocess import (
    KEY,
    LEASE,
    OTHER_KIND,
    Harness,
    bounded,
    listening_workers,
    until,
)

N = 7
CONCURRENCY = 2


def _pool(
    settings: Settings, database_url: str, clock: Clock, handlers: dict[str, Handler]
) -> WorkerPool:
    return WorkerPool(
        settings,
        database_url=database_url,
        concurrency=CONCURRENCY,
        worker_id="w-pool",
        handlers=handlers,
        clock=clock,
    )


async def _states(harness: Harness, job_ids: Iterable[uuid.UUID]) -> list[str]:
    return [(await harness.row(job_id)).state for job_id in job_ids]


async def test_the_pool_runs_every_job_it_has_a_handler_for_and_stops_when_asked(
    harness: Harness, settings: Settings, database_url: str
) -> None:
    unserved = await harness.create(OTHER_KIND)  # the oldest job, but not ours to run
    job_ids = [await harness.create() for _ in range(N)]
    ran: list[uuid.UUID] = []
    in_handler = 0
    most_in_handler = 0

    async def handler(ctx: JobContext) -> PublishPlan:
        nonlocal in_handler, most_in_handler
        in_handler += 1
        most_in_handler = max(most_in_handler, in_handler)
        try:
            await asyncio.sleep(0)  # let the others in, if the pool allowed more
            ran.append(ctx.job_id)
            return NO_FILES
        finally:
            in_handler -= 1

    pool = _pool(settings, database_url, harness.clock, {KEY: handler})
    stop = asyncio.Event()
    task = asyncio.create_task(pool.run(stop))
    try:
        await until(
            lambda: _states(harness, job_ids),
            lambda states: states == ["succeeded"] * N,
        )
    finally:
        stop.set()
        await bounded(task)  # drains and returns (and disposes its own engine)

    assert task.result() is None
    assert pool.slots.running == {}
    assert sorted(ran) == sorted(job_ids)  # each job ran exactly once
    assert 1 <= most_in_handler <= CONCURRENCY
    for job_id in job_ids:
        [attempt] = await harness.attempts(job_id)
        assert (attempt.worker_id, attempt.outcome) == ("w-pool", "succeeded")
        assert [m[0] for m in await harness.moves(job_id)] == ["create", "claim", "publish"]
    row = await harness.row(unserved)
    assert (row.state, row.attempt, row.worker_id) == ("queued", 0, None)
    assert await harness.moves(unserved) == [("create", None, "queued")]
    assert await harness.attempts(unserved) == []


async def test_on_stop_a_job_at_a_safe_point_is_released_uncharged(
    harness: Harness, settings: Settings, database_url: str
) -> None:
    job_id = await harness.create(max_attempts=1)
    started, proceed = asyncio.Event(), asyncio.Event()
    contexts: list[JobContext] = []

    async def handler(ctx: JobContext) -> PublishPlan:
        contexts.append(ctx)
        started.set()
        await proceed.wait()
        await ctx.safe_point()
        return NO_FILES

    pool = _pool(settings, database_url, harness.clock, {KEY: handler})
    stop = asyncio.Event()
    task = asyncio.create_task(pool.run(stop))
    try:
        await bounded(started.wait())
        stop.set()
        [ctx] = contexts
        await until(lambda: asyncio.sleep(0, ctx.draining), bool)  # the drain began
        proceed.set()  # well within the grace period: the handler reaches its safe point
    finally:
        stop.set()
        proceed.set()
        await bounded(task)

    await _assert_released(harness, job_id)


async def test_on_stop_a_blocked_handler_is_interrupted_and_its_job_released(
    harness: Harness, settings: Settings, database_url: str
) -> None:
    """A handler that never reaches a safe point is cancelled when the grace period
    ends, and the runner still hands its job back (a shielded write)."""
    job_id = await harness.create(max_attempts=1)
    started, never = asyncio.Event(), asyncio.Event()
    interrupted: list[bool] = []

    async def handler(ctx: JobContext) -> PublishPlan:
        started.set()
        try:
            await never.wait()
        except asyncio.CancelledError:
            interrupted.append(True)
            raise
        return NO_FILES

    pool = _pool(
        settings.model_copy(update={"shutdown_grace_seconds": 0.0}),
        database_url,
        harness.clock,
        {KEY: handler},
    )
    stop = asyncio.Event()
    task = asyncio.create_task(pool.run(stop))
    try:
        await bounded(started.wait())
    finally:
        stop.set()
        await bounded(task)

    assert interrupted == [True]
    await _assert_released(harness, job_id)


async def _assert_released(harness: Harness, job_id: uuid.UUID) -> None:
    row = await harness.row(job_id)
    assert (row.state, row.reason, row.charged_attempts) == ("queued", "retry", 0)
    assert row.worker_id is None
    [attempt] = await harness.attempts(job_id)
    assert (attempt.worker_id, attempt.outcome, attempt.charged) == ("w-pool", "released", 0)
    assert (await harness.moves(job_id))[-1] == ("release", "running", "queued")
    last = (await harness.history(job_id))[-1]
    assert last.actor == "worker:w-pool"


async def test_a_heartbeat_that_finds_the_lease_gone_stops_the_job_and_frees_its_slot(
    harness: Harness, settings: Settings, database_url: str
) -> None:
    job_id = await harness.create()
    started = asyncio.Event()
    interrupted: list[bool] = []

    async def handler(ctx: JobContext) -> PublishPlan:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            interrupted.append(True)
            raise
        return NO_FILES

    pool = _pool(settings, database_url, harness.clock, {KEY: handler})
    stop = asyncio.Event()
    task = asyncio.create_task(pool.run(stop))
    try:
        await bounded(started.wait())
        [(ctx, job_task)] = pool.slots.running.values()
        before = await harness.snapshot(job_id)
        harness.clock.advance(LEASE + 1)  # the pool shares this clock: its lease is gone
        await bounded(pool.heartbeat.beat_once())
        await bounded(asyncio.gather(job_task, return_exceptions=True))
        assert ctx.lost
        assert interrupted == [True]
        assert job_id not in pool.slots.running
        assert await harness.snapshot(job_id) == before  # the stale task wrote nothing
    finally:
        stop.set()
        await bounded(task)
    row = await harness.row(job_id)
    assert (row.state, row.current_attempt_id) == ("running", ctx.attempt_id)  # for the reaper


async def test_a_notification_wakes_an_idle_pool_with_no_poll(
    harness: Harness, settings: Settings, database_url: str
) -> None:
    """Polling every 60 s, the pool starts a job created while it sleeps at once, with
    ONE claim: the notification, not a poll, woke it."""
    quiet = settings.model_copy(update={"poll_interval_seconds": 60.0})
    ran: list[uuid.UUID] = []

    async def handler(ctx: JobContext) -> PublishPlan:
        ran.append(ctx.job_id)
        return NO_FILES

    pool = _pool(quiet, database_url, harness.clock, {KEY: handler})
    claims = record_claims(pool.engine)
    stop = asyncio.Event()
    task = asyncio.create_task(pool.run(stop))
    try:
        await until(lambda: listening_workers(harness.engine), bool)
        await until(lambda: asyncio.sleep(0, len(claims)), lambda n: n >= 1)
        await asyncio.sleep(0.2)  # the claim after the listener's first wake, if any
        idle_claims = len(claims)
        job_id = await harness.create()
        await until(lambda: _states(harness, [job_id]), lambda s: s == ["succeeded"])
        assert ran == [job_id]
        assert len(claims) == idle_claims + 1  # woken once, claimed once
    finally:
        stop.set()
        await bounded(task)


async def test_from_a_notification_to_the_handler_the_pool_sends_only_the_claim(
    harness: Harness, settings: Settings, database_url: str
) -> None:
    """The pickup path of an idle pool: between a job's creation and its handler's
    start the pool sends ONE statement on all its connections -- the claim, without
    BEGIN/COMMIT around it: no read, no heartbeat or progress write, no second claim
    (docs/performance.md, pickup latency). (The worker registry's beat is on its own
    cadence, moved out of the way here.)"""
    quiet = settings.model_copy(
        update={
            "poll_interval_seconds": 60.0,
            "worker_heartbeat_seconds": 60.0,
            "worker_live_window_seconds": 180.0,
        }
    )
    at_start: list[list[str]] = []

    async def handler(ctx: JobContext) -> PublishPlan:
        at_start.append([*on_pool, *on_heartbeat])
        return NO_FILES

    pool = _pool(quiet, database_url, harness.clock, {KEY: handler})
    on_pool = record_round_trips(pool.engine)
    on_heartbeat = record_round_trips(pool.heartbeat_engine)
    stop = asyncio.Event()
    task = asyncio.create_task(pool.run(stop))
    try:
        await until(lambda: listening_workers(harness.engine), bool)
        await until(lambda: asyncio.sleep(0, on_pool), bool)  # the first (idle) claim
        await asyncio.sleep(0.2)  # the claim after the listener's first wake, if any
        assert on_pool[0].lstrip().startswith(CLAIM_PREFIX)  # what is sent is recorded
        on_pool.clear()
        on_heartbeat.clear()
        job_id = await harness.create()
        await until(lambda: _states(harness, [job_id]), lambda s: s == ["succeeded"])
        [statements] = at_start
        assert [s.lstrip()[: len(CLAIM_PREFIX)] for s in statements] == [CLAIM_PREFIX]
    finally:
        stop.set()
        await bounded(task)


async def test_a_notification_that_arrives_during_a_claim_is_kept(
    harness: Harness, settings: Settings, database_url: str
) -> None:
    """The wake-up flag is cleared BEFORE the claim: a job announced while a claim that
    finds nothing is in flight is claimed right after it, not at the next poll (60 s,
    beyond this test's bound)."""
    quiet = settings.model_copy(update={"poll_interval_seconds": 60.0})
    ran: list[uuid.UUID] = []

    async def handler(ctx: JobContext) -> PublishPlan:
        ran.append(ctx.job_id)
        return NO_FILES

    pool = _pool(quiet, database_url, harness.clock, {KEY: handler})
    claim = pool.transitions.claim_to_run
    announced: list[uuid.UUID] = []

    async def claim_then_announce(*args: Any, **kwargs: Any) -> list[Any]:
        rows = await claim(*args, **kwargs)
        if not rows and not announced and await listening_workers(harness.engine):
            # The claim found nothing; a job is created (and announced) before the
            # claim returns to the loop, and its notification is delivered meanwhile.
            announced.append(await harness.create())
            await until(lambda: asyncio.sleep(0, pool.claimer.woken.is_set()), bool)
        return rows

    pool.transitions.claim_to_run = claim_then_announce  # type: ignore[method-assign]
    stop = asyncio.Event()
    task = asyncio.create_task(pool.run(stop))
    try:
        await until(lambda: asyncio.sleep(0, len(announced)), lambda n: n == 1)
        await until(lambda: _states(harness, announced), lambda s: s == ["succeeded"])
        assert ran == announced
    finally:
        stop.set()
        await bounded(task)
