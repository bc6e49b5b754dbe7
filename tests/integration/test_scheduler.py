"""The scheduler against the real database: one job per tick, whoever evaluates it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta
from itertools import pairwise
from typing import Any

import pytest
from sqlalchemy import func, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import schedules
from atlas_jobs._app.db.engine import create_engine
from atlas_jobs._app.db.schema import job_history, jobs, schedule_fires
from atlas_jobs._app.db.schema import schedules as schedules_table
from atlas_jobs._app.scheduling import MisfirePolicy, OverlapPolicy, parse
from atlas_jobs._app.transitions import Actor, Transitions
from atlas_jobs._workers.scheduler import Scheduler

NOOP_INPUT: dict[str, Any] = {}


def spec(
    cron: str = "* * * * * *",
    *,
    kind: str = "atlas.noop",
    policy: MisfirePolicy = MisfirePolicy.SKIP,
    grace: int = 60,
    limit: int = 10,
) -> schedules.ScheduleSpec:
    return schedules.ScheduleSpec(
        owner="alice",
        name="every second",
        cron=parse(cron, "UTC"),
        kind=kind,
        kind_version=1,
        input=NOOP_INPUT,
        enabled=True,
        misfire_policy=policy,
        misfire_grace_seconds=grace,
        catch_up_limit=limit,
    )


async def add(engine: AsyncEngine, clock: Clock, made: schedules.ScheduleSpec) -> Any:
    async with engine.begin() as conn:
        return await schedules.insert(conn, made, created_by="client:alice", clock=clock)


async def fired(engine: AsyncEngine, schedule_id: uuid.UUID) -> list[Any]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(schedule_fires)
            .where(schedule_fires.c.schedule_id == schedule_id)
            .order_by(schedule_fires.c.fire_at)
        )
        return list(rows.all())


@pytest.fixture
async def other_engines(database_url: str) -> AsyncIterator[list[AsyncEngine]]:
    engines = [create_engine(database_url, pool_size=2) for _ in range(3)]
    yield engines
    for engine in engines:
        await engine.dispose()


async def test_due_ticks_become_jobs_with_the_schedule_and_tick_in_their_history(
    engine: AsyncEngine, clock: Clock, transitions: Transitions
) -> None:
    schedule = await add(engine, clock, spec())
    scheduler = Scheduler(engine, transitions)
    made = await scheduler.run_once()  # 0, unless the box is slow enough for a tick
    clock.advance(3.5)
    made += await scheduler.run_once()
    assert made >= 3  # every tick in (created, now]
    rows = await fired(engine, schedule.id)
    assert len(rows) == made
    assert all(row.job_id is not None for row in rows)
    ticks = [row.fire_at for row in rows]
    assert all(b - a == timedelta(seconds=1) for a, b in pairwise(ticks))
    async with engine.connect() as conn:
        created = (
            await conn.execute(
                select(jobs.c.id, jobs.c.owner, jobs.c.kind, jobs.c.state).where(
                    jobs.c.id.in_([row.job_id for row in rows])
                )
            )
        ).all()
        history = (
            await conn.execute(
                select(job_history.c.job_id, job_history.c.actor, job_history.c.data).where(
                    job_history.c.job_id.in_([row.job_id for row in rows])
                )
            )
        ).all()
        after = (
            await conn.execute(select(schedules_table).where(schedules_table.c.id == schedule.id))
        ).one()
    assert {(r.owner, r.kind, r.state) for r in created} == {("alice", "atlas.noop", "queued")}
    tick_of = {row.job_id: row.fire_at for row in rows}
    assert len(history) == made
    for item in history:
        assert item.actor == "system:scheduler"
        assert item.data["schedule_id"] == str(schedule.id)
        assert item.data["tick"] == tick_of[item.job_id].isoformat()
    assert after.fired_count == made
    assert after.last_fire_at == ticks[-1]
    assert after.last_job_id == rows[-1].job_id
    assert after.next_fire_at == ticks[-1] + timedelta(seconds=1)
    clock.advance(-10)  # the clock going back never fires a tick twice
    assert await scheduler.run_once() == 0


async def test_concurrent_schedulers_create_exactly_one_job_per_tick(
    engine: AsyncEngine,
    clock: Clock,
    transitions: Transitions,
    other_engines: list[AsyncEngine],
) -> None:
    """Four schedulers on four connections evaluate the same schedules at once, over
    and over: every tick fires once, none is missing."""
    ids = [(await add(engine, clock, spec())).id for _ in range(5)]
    schedulers = [Scheduler(e, transitions) for e in [engine, *other_engines]]
    for _ in range(12):
        clock.advance(0.5)
        await asyncio.gather(*(s.run_once() for s in schedulers for _ in range(2)))
    for schedule_id in ids:
        rows = await fired(engine, schedule_id)
        ticks = [row.fire_at for row in rows]
        assert len(ticks) >= 5
        assert len(set(ticks)) == len(ticks)
        assert all(b - a == timedelta(seconds=1) for a, b in pairwise(ticks))
    async with engine.connect() as conn:
        fires = (await conn.execute(select(func.count()).select_from(schedule_fires))).scalar()
        made = (await conn.execute(select(func.count()).select_from(jobs))).scalar()
    assert fires == made


async def test_a_tick_recorded_before_is_never_recorded_again(
    engine: AsyncEngine, clock: Clock
) -> None:
    """The arbiter itself: whatever the lock did, the second recording of a tick returns
    nothing, so no job is created for it."""
    schedule = await add(engine, clock, spec())
    tick = schedule.next_fire_at
    async with engine.begin() as conn:
        first = await schedules.record_fires(conn, [(schedule.id, tick)])
    async with engine.begin() as conn:
        again = await schedules.record_fires(conn, [(schedule.id, tick)])
    assert first == {(schedule.id, tick)}
    assert again == set()


async def test_catch_up_fires_the_missed_ticks_once_and_skip_drops_them(
    engine: AsyncEngine, clock: Clock, transitions: Transitions
) -> None:
    catch_up = await add(engine, clock, spec(policy=MisfirePolicy.CATCH_UP, limit=100))
    skip = await add(engine, clock, spec(policy=MisfirePolicy.SKIP, grace=2))
    scheduler = Scheduler(engine, transitions)
    clock.advance(10.2)  # ten ticks with no scheduler running
    await scheduler.run_once()
    await scheduler.run_once()
    caught = [row.fire_at for row in await fired(engine, catch_up.id)]
    skipped = [row.fire_at for row in await fired(engine, skip.id)]
    # every tick since creation (10 or 11 of them, by where in its second it was made)
    assert len(caught) >= 10
    assert caught[0] == catch_up.next_fire_at
    assert all(b - a == timedelta(seconds=1) for a, b in pairwise(caught))
    # only the ticks within the 2 s grace
    assert skipped[0] >= caught[0] + timedelta(seconds=7)
    assert skipped[-1] == caught[-1]


async def test_a_schedule_of_an_unknown_kind_is_disabled_not_retried_forever(
    engine: AsyncEngine, clock: Clock, transitions: Transitions
) -> None:
    schedule = await add(engine, clock, spec())
    async with engine.begin() as conn:
        await conn.execute(
            update(schedules_table)
            .where(schedules_table.c.id == schedule.id)
            .values(kind="gone.kind")
        )
    healthy = await add(engine, clock, spec())
    clock.advance(2.5)
    await Scheduler(engine, transitions).run_once()
    async with engine.connect() as conn:
        broken = await schedules.get(conn, schedule.id, owner=None)
    assert broken is not None
    assert broken.enabled is False
    assert await fired(engine, schedule.id) == []
    assert len(await fired(engine, healthy.id)) >= 2


async def test_pausing_and_resuming_does_not_catch_up_the_pause(
    engine: AsyncEngine, clock: Clock, transitions: Transitions
) -> None:
    schedule = await add(engine, clock, spec(policy=MisfirePolicy.CATCH_UP, limit=100))
    async with engine.begin() as conn:
        await schedules.change(
            conn, schedule.id, owner="alice", changes={"enabled": False}, clock=clock
        )
    clock.advance(20)
    scheduler = Scheduler(engine, transitions)
    assert await scheduler.run_once() == 0
    async with engine.begin() as conn:
        resumed = await schedules.change(
            conn, schedule.id, owner="alice", changes={"enabled": True}, clock=clock
        )
    assert resumed is not None
    clock.advance(1.5)
    assert await scheduler.run_once() >= 1
    ticks = [row.fire_at for row in await fired(engine, schedule.id)]
    assert min(ticks) == resumed.next_fire_at  # nothing from the 20 s pause


async def test_old_fire_rows_are_pruned_in_bounded_batches(
    engine: AsyncEngine, clock: Clock
) -> None:
    schedule = await add(engine, clock, spec())
    base = schedule.next_fire_at
    async with engine.begin() as conn:
        await schedules.record_fires(
            conn, [(schedule.id, base + timedelta(seconds=i)) for i in range(30)]
        )
    clock.advance(100)
    async with engine.begin() as conn:
        first = await schedules.prune_fires(conn, clock, keep_seconds=10, limit=20)
        second = await schedules.prune_fires(conn, clock, keep_seconds=10, limit=20)
        left = (await conn.execute(text("SELECT count(*) FROM schedule_fires"))).scalar()
    assert (first, second, left) == (20, 10, 0)


async def test_overlap_skip_fires_no_tick_while_the_last_job_is_unfinished(
    engine: AsyncEngine, clock: Clock, transitions: Transitions
) -> None:
    made = replace(spec(), overlap=OverlapPolicy.SKIP)
    schedule = await add(engine, clock, made)
    scheduler = Scheduler(engine, transitions)
    clock.advance(1.2)
    first = await scheduler.run_once()
    assert first >= 1  # nothing was running: the due ticks fire (allowed to overlap each other)
    clock.advance(3)
    assert await scheduler.run_once() == 0  # the last job is still queued: skipped
    async with engine.connect() as conn:
        row = await schedules.get(conn, schedule.id, owner=None)
    assert row is not None
    async with engine.begin() as conn:
        outcome = await transitions.request_cancel(
            conn, row.last_job_id, actor=Actor("client", "alice")
        )
    assert outcome.ok
    clock.advance(1.5)
    assert await scheduler.run_once() >= 1  # finished: ticks fire again
    ticks = [r.fire_at for r in await fired(engine, schedule.id)]
    assert len(ticks) == len(set(ticks))
