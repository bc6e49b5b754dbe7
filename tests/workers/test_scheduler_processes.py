"""Schedules fired by real worker processes: exactly one job per tick while processes
die (kill -9) and come back, and missed ticks after an outage by each policy."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import schedules
from atlas_jobs._app.db.schema import job_history, schedule_fires
from atlas_jobs._app.scheduling import MisfirePolicy, parse
from atlas_jobs._app.transitions import Actor, NewJob, Transitions
from tests.workers.conftest import MakeFleet
from tests.workers.dbwait import eventually

ONE_SECOND = timedelta(seconds=1)


async def add_schedule(
    engine: AsyncEngine, policy: MisfirePolicy, *, grace: int = 60, limit: int = 100
) -> Any:
    spec = schedules.ScheduleSpec(
        owner="alice",
        name=f"every second ({policy})",
        cron=parse("* * * * * *", "UTC"),
        kind="atlas.noop",
        kind_version=1,
        input={},
        enabled=True,
        misfire_policy=policy,
        misfire_grace_seconds=grace,
        catch_up_limit=limit,
    )
    async with engine.begin() as conn:
        return await schedules.insert(conn, spec, created_by="client:alice", clock=Clock())


async def ticks_of(engine: AsyncEngine, schedule_id: uuid.UUID) -> list[datetime]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(schedule_fires.c.fire_at)
            .where(schedule_fires.c.schedule_id == schedule_id)
            .order_by(schedule_fires.c.fire_at)
        )
        return [row.fire_at for row in rows]


async def db_now(engine: AsyncEngine) -> datetime:
    async with engine.connect() as conn:
        return await schedules.database_now(conn, Clock())


async def fired_through(engine: AsyncEngine, schedule_id: uuid.UUID, until: datetime) -> None:
    """Wait until the schedule's ticks reach ``until``."""
    await eventually(
        lambda: ticks_of(engine, schedule_id),
        lambda ticks: bool(ticks) and ticks[-1] >= until,
        timeout=60,
        interval=0.25,
        what=f"ticks through {until}",
    )


async def jobs_per_tick(engine: AsyncEngine, schedule_id: uuid.UUID) -> dict[str, int]:
    """How many jobs the history says each tick created."""
    async with engine.connect() as conn:
        tick = job_history.c.data["tick"].astext.label("tick")
        rows = await conn.execute(
            select(tick, func.count())
            .where(
                job_history.c.transition == "create",
                job_history.c.data["schedule_id"].astext == str(schedule_id),
            )
            .group_by(text("tick"))
        )
        return {tick: count for tick, count in rows}


def gaps(ticks: list[datetime]) -> list[tuple[datetime, datetime]]:
    return [(a, b) for a, b in pairwise(ticks) if b - a != ONE_SECOND]


async def test_one_job_per_tick_with_three_processes_and_one_killed(
    engine: AsyncEngine, make_fleet: MakeFleet
) -> None:
    fleet = make_fleet()
    workers = [fleet.start(f"sched-{i}", concurrency=2) for i in range(3)]
    schedule = await add_schedule(engine, MisfirePolicy.SKIP)
    start = await db_now(engine)
    await fired_through(engine, schedule.id, start + 3 * ONE_SECOND)
    await asyncio.sleep(7)
    workers[1].kill()  # kill -9 mid-way: whatever it held rolls back
    await asyncio.sleep(10)
    end = await db_now(engine)
    await fired_through(engine, schedule.id, end)
    ticks = await ticks_of(engine, schedule.id)
    window = [t for t in ticks if t <= end]
    assert gaps(window) == [], fleet.logs()
    assert window[0] <= start + 2 * ONE_SECOND
    assert len(window) >= 18
    per_tick = await jobs_per_tick(engine, schedule.id)
    assert len(per_tick) == len(ticks)
    assert set(per_tick.values()) == {1}
    assert workers[0].alive()
    assert workers[2].alive()


async def test_after_an_outage_catch_up_fires_the_missed_ticks_once_and_skip_does_not(
    engine: AsyncEngine, make_fleet: MakeFleet
) -> None:
    fleet = make_fleet()
    first = [fleet.start(f"before-{i}", concurrency=2) for i in range(2)]
    catch_up = await add_schedule(engine, MisfirePolicy.CATCH_UP)
    skip = await add_schedule(engine, MisfirePolicy.SKIP, grace=1)
    start = await db_now(engine)
    await fired_through(engine, catch_up.id, start + 2 * ONE_SECOND)
    await fired_through(engine, skip.id, start + 2 * ONE_SECOND)
    for worker in first:
        worker.kill()
    down_from = await db_now(engine)
    await asyncio.sleep(5)  # no process evaluates any schedule
    fleet.start("after", concurrency=2)
    back = await db_now(engine)
    await fired_through(engine, catch_up.id, back + 2 * ONE_SECOND)
    await fired_through(engine, skip.id, back + 2 * ONE_SECOND)

    caught = await ticks_of(engine, catch_up.id)
    assert gaps(caught) == [], fleet.logs()
    outage = [t for t in caught if down_from < t < back]
    assert len(outage) >= 4
    per_tick = await jobs_per_tick(engine, catch_up.id)
    assert len(per_tick) == len(caught)
    assert set(per_tick.values()) == {1}

    skipped = await ticks_of(engine, skip.id)
    assert [t for t in skipped if down_from + 2 * ONE_SECOND < t < back - ONE_SECOND] == []
    assert len(gaps(skipped)) == 1


async def test_ticks_beyond_the_owners_cap_are_refused_and_recorded_then_fire_again(
    engine: AsyncEngine, make_fleet: MakeFleet, transitions: Transitions
) -> None:
    """With the owner at its cap of unfinished jobs (three jobs no worker can run), a
    worker process's scheduler refuses every tick -- recorded with its reason, the owner
    never beyond the cap -- and fires again once a job ends and frees a place."""
    parked = [
        NewJob(
            owner="alice",
            kind="atlas.noop",
            kind_version=99,  # no handler: stays queued
            input={},
            max_attempts=1,
            max_elapsed_seconds=600,
        )
        for _ in range(3)
    ]
    async with engine.begin() as conn:
        created = await transitions.create_many(conn, parked, actor=Actor("client", "alice"))
    fleet = make_fleet(admission_max_active_per_owner=3)
    fleet.start("capped", concurrency=2)
    schedule = await add_schedule(engine, MisfirePolicy.SKIP)

    async def fires() -> list[Any]:
        async with engine.connect() as conn:
            return list(await schedules.fires(conn, schedule.id, before=None, limit=1000))

    refused = await eventually(
        fires, lambda rows: len(rows) >= 3, timeout=60, interval=0.25, what="three ticks"
    )
    assert {(row.job_id, row.refusal) for row in refused} == {(None, "owner_at_capacity")}
    async with engine.connect() as conn:
        row = await schedules.get(conn, schedule.id, owner=None)
    assert row is not None
    assert (row.fired_count, row.refused_count >= 3) == (0, True)
    assert row.last_refusal == "owner_at_capacity"

    async with engine.begin() as conn:  # a place frees up: the next ticks fire
        await transitions.request_cancel(conn, created[0].job.id, actor=Actor("client", "alice"))
    made = await eventually(
        fires,
        lambda rows: any(r.job_id is not None for r in rows),
        timeout=60,
        interval=0.25,
        what="a tick that created a job",
    )
    assert all(r.refusal is None for r in made if r.job_id is not None), fleet.logs()
