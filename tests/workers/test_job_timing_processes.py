"""Timing on a real worker process: a delayed job is not started before its ``run_at``,
and a job whose start deadline passes while no worker runs is never started -- the
worker that comes up afterwards serves its kind, yet its claim refuses the job and its
sweeper ends it (``failed``, ``start_deadline_passed``)."""

from __future__ import annotations

import uuid

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.lifecycle import JobState
from atlas_jobs._app.transitions import Transitions
from tests.workers.conftest import MakeFleet
from tests.workers.dbwait import (
    CLIENT,
    attempt_rows,
    eventually,
    history,
    new_job,
    wait_for_state,
)

DEADLINE_SECONDS = 2.0
DELAY_SECONDS = 6.0


async def deadline_passed(engine: AsyncEngine, job_id: uuid.UUID) -> bool:
    async with engine.connect() as conn:
        passed = await conn.scalar(
            text("SELECT start_by < now() FROM jobs WHERE id = :id"), {"id": job_id}
        )
    return bool(passed)


async def test_delays_hold_and_a_missed_start_deadline_never_runs_on_a_real_worker(
    engine: AsyncEngine, transitions: Transitions, make_fleet: MakeFleet
) -> None:
    noop = new_job("atlas.noop", {})
    async with engine.begin() as conn:
        [missed, delayed, plain] = [
            created.job.id
            for created in await transitions.create_many(
                conn,
                [
                    noop._replace(start_within=DEADLINE_SECONDS),
                    noop._replace(run_after=DELAY_SECONDS),
                    noop._replace(start_within=600.0),
                ],
                actor=CLIENT,
            )
        ]
    # No worker runs while the first job's start deadline passes.
    await eventually(
        lambda: deadline_passed(engine, missed), bool, timeout=30, what="the start deadline"
    )
    fleet = make_fleet()
    worker = fleet.start("timing-w1", concurrency=2)
    try:
        ran = await wait_for_state(engine, plain, JobState.SUCCEEDED, timeout=60)
        ended = await wait_for_state(engine, missed, JobState.FAILED, timeout=60)
        done = await wait_for_state(engine, delayed, JobState.SUCCEEDED, timeout=60)
    except AssertionError:
        raise AssertionError(fleet.logs()) from None
    assert worker.alive()

    assert ran.start_by is not None  # a deadline still ahead does not stop a start
    assert (ended.reason, ended.attempt, ended.error["code"]) == (
        "start_deadline_passed",
        0,
        "start_deadline_passed",
    )
    assert await attempt_rows(engine, missed) == []
    assert [(h.transition, h.to_state, h.actor) for h in await history(engine, missed)] == [
        ("create", "queued", "client:tester"),
        ("miss_start", "failed", "system:sweeper"),
    ]

    [attempt] = await attempt_rows(engine, delayed)
    assert done.run_at is not None
    assert attempt.claimed_at >= done.run_at
    claim = [h for h in await history(engine, delayed) if h.transition == "claim"]
    assert len(claim) == 1
    assert claim[0].at >= done.run_at
