"""Graceful shutdown: SIGTERM leaves no job running and loses no work."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.schema import job_checkpoints
from atlas_jobs._app.lifecycle import JobState
from atlas_jobs._app.transitions import Transitions
from tests.workers.conftest import MakeFleet
from tests.workers.dbwait import (
    attempt_rows,
    create_bundle,
    history,
    job_row,
    wait_for,
    wait_for_state,
)


async def test_sigterm_releases_running_jobs_at_a_safe_point_and_exits_0(
    engine: AsyncEngine, transitions: Transitions, make_fleet: MakeFleet
) -> None:
    fleet = make_fleet(bundle_time_scale=0.2, shutdown_grace_seconds=10.0)
    first, second = [await create_bundle(engine, transitions, "coast") for _ in range(2)]
    worker = fleet.start("w1", concurrency=2)
    for job_id in (first, second):
        await wait_for(engine, job_id, lambda r: r.current_stage == "build", timeout=60)

    assert worker.terminate(timeout=30) == 0, worker.log()

    for job_id in (first, second):
        row = await job_row(engine, job_id)
        assert row.state == JobState.QUEUED.value  # handed back, not left running
        assert row.current_attempt_id is None
        assert row.charged_attempts == 0  # the attempt is not charged as a failure
        [attempt] = await attempt_rows(engine, job_id)
        assert (attempt.outcome, attempt.charged) == ("released", 0)
        events = await history(engine, job_id)
        assert (events[-1].transition, events[-1].from_state, events[-1].to_state) == (
            "release",
            "running",
            "queued",
        )

    # Nothing is lost: another worker finishes both, reusing the finished units.
    fleet.start("w2", concurrency=2)
    for job_id in (first, second):
        row = await wait_for_state(engine, job_id, JobState.SUCCEEDED, timeout=60)
        assert row.attempt == 2
        tries = await attempt_rows(engine, job_id)
        async with engine.connect() as conn:
            validated_by = {
                r.attempt_id
                for r in await conn.execute(
                    select(job_checkpoints.c.attempt_id).where(
                        job_checkpoints.c.job_id == job_id, job_checkpoints.c.stage == "validate"
                    )
                )
            }
        assert validated_by == {tries[0].id}


async def test_a_unit_longer_than_the_grace_period_is_interrupted_and_released(
    engine: AsyncEngine, transitions: Transitions, make_fleet: MakeFleet
) -> None:
    # Each tile takes 1.5 s; the grace period is 0.3 s.
    fleet = make_fleet(bundle_time_scale=1.0, shutdown_grace_seconds=0.3, lease_seconds=5.0)
    job_id = await create_bundle(engine, transitions, "coast")
    worker = fleet.start("w1", concurrency=1)
    await wait_for(engine, job_id, lambda r: r.current_stage == "build", timeout=60)

    assert worker.terminate(timeout=30) == 0, worker.log()

    row = await job_row(engine, job_id)
    assert row.state == JobState.QUEUED.value
    assert row.charged_attempts == 0
    [attempt] = await attempt_rows(engine, job_id)
    assert attempt.outcome == "released"


async def test_sigterm_releases_a_job_waiting_in_the_local_queue_without_starting_it(
    engine: AsyncEngine, transitions: Transitions, make_fleet: MakeFleet
) -> None:
    """Concurrency 1, prefetch as the default (= the concurrency): once the first claim
    came back full, one more job is claimed ahead and waits for the slot. SIGTERM
    hands it back uncharged, never started; the third job was never claimed."""
    fleet = make_fleet(bundle_time_scale=1.0, shutdown_grace_seconds=0.3)
    first, ahead, last = [await create_bundle(engine, transitions, "coast") for _ in range(3)]
    worker = fleet.start("w1", concurrency=1)
    await wait_for(engine, first, lambda r: r.current_stage == "build", timeout=60)
    await wait_for(engine, ahead, lambda r: r.state == JobState.RUNNING.value, timeout=30)

    assert worker.terminate(timeout=30) == 0, worker.log()

    for job_id in (first, ahead):
        row = await job_row(engine, job_id)
        assert (row.state, row.charged_attempts, row.worker_id) == ("queued", 0, None)
        [attempt] = await attempt_rows(engine, job_id)
        assert (attempt.outcome, attempt.charged) == ("released", 0)
        last_event = (await history(engine, job_id))[-1]
        assert (last_event.transition, last_event.from_state, last_event.to_state) == (
            "release",
            "running",
            "queued",
        )
    held = await job_row(engine, ahead)
    assert held.current_stage is None  # its handler never ran
    assert await attempt_rows(engine, last) == []
    assert [e.transition for e in await history(engine, last)] == ["create"]
