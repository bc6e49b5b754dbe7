"""The charts' rollup against a real PostgreSQL: a pass counts the last minutes'
creations and endings by outcome per kind, samples the queue (its oldest claimable
job's age), repeats idempotently, and the chart query buckets what it wrote."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import activity
from atlas_jobs._app.lifecycle import JobState
from tests.factory import JobFactory


def totals(chart: activity.Chart) -> dict[str, int]:
    sums = {"created": 0, "succeeded": 0, "failed": 0, "canceled": 0, "queued": 0}
    for point in chart.points:
        for name in sums:
            sums[name] += getattr(point, name)
    return sums


async def test_a_pass_counts_creations_endings_and_the_queue_per_kind(
    engine: AsyncEngine, jobs: JobFactory
) -> None:
    clock = Clock()
    made = {
        state: [await jobs.make(state) for _ in range(count)]
        for state, count in (
            (JobState.QUEUED, 3),
            (JobState.SUCCEEDED, 2),
            (JobState.FAILED, 1),
            (JobState.CANCELED, 1),
            (JobState.RUNNING, 1),
        )
    }
    async with engine.begin() as conn:  # the oldest queued job has waited 90 s
        await conn.execute(
            text("UPDATE jobs SET available_at = now() - interval '90 seconds' WHERE id = :id"),
            {"id": made[JobState.QUEUED][0].id},
        )
    for _ in range(2):  # a second pass over the same minutes writes the same numbers
        async with engine.begin() as conn:
            assert await activity.roll_up(conn, clock)
        async with engine.connect() as conn:
            hour = await activity.chart(conn, clock, window_minutes=60, bucket_minutes=1)
        assert totals(hour) == {
            "created": 8,
            "succeeded": 2,
            "failed": 1,
            "canceled": 1,
            "queued": 3,
        }
    assert len(hour.buckets) == 60
    assert {p.bucket for p in hour.points} <= set(hour.buckets[-2:])
    oldest = max(p.oldest_queued_seconds or 0 for p in hour.points)
    assert 90 <= oldest < 150
    assert len(hour.kinds()) == 8  # the factory gives each job its own kind

    async with engine.connect() as conn:
        day = await activity.chart(conn, clock, window_minutes=1440, bucket_minutes=24)
    assert len(day.buckets) == 60
    assert totals(day)["created"] == 8


async def test_one_process_at_a_time_and_an_empty_window_still_has_its_buckets(
    engine: AsyncEngine,
) -> None:
    clock = Clock()
    async with engine.begin() as first, engine.begin() as second:
        assert await activity.roll_up(first, clock)
        assert not await activity.roll_up(second, clock)  # the lock is held: skipped
    async with engine.connect() as conn:
        empty = await activity.chart(conn, clock, window_minutes=60, bucket_minutes=1)
    assert (len(empty.buckets), empty.points) == (60, [])
