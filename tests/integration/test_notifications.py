"""The migration's trigger announces changes, so no writer can forget to.

``atlas_job_changed`` carries the job id on every version bump (status readers holding
``Prefer: wait`` wake up), not on a creation: no reader can be watching a job before it
exists (revision d0e1f2a3b4c5); ``atlas_work`` carries the kind whenever a job becomes
queued, created so or moved back (idle workers wake up). Heartbeats do not bump the
version and must stay silent. Notifications arrive in commit order, so a later change
is a sentinel: once it has arrived, everything before it has too.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.engine import libpq_url
from atlas_jobs._app.lifecycle import JobState
from atlas_jobs._app.transitions import Transitions, error_doc
from tests.factory import CLIENT, WORKER, JobFactory

Heard = list[tuple[str, str]]


@pytest.fixture
async def heard(database_url: str) -> AsyncIterator[Heard]:
    conn = await asyncpg.connect(libpq_url(database_url))
    got: Heard = []

    def listen(_: object, __: int, channel: str, payload: str) -> None:
        got.append((channel, payload))

    for channel in ("atlas_job_changed", "atlas_work"):
        await conn.add_listener(channel, listen)
    yield got
    await conn.close()


async def until_heard(heard: Heard, item: tuple[str, str], times: int) -> None:
    for _ in range(1000):
        if heard.count(item) >= times:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never heard {item} {times} times; heard {heard}")


async def test_changes_and_new_work_are_announced(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory, heard: Heard
) -> None:
    made = await jobs.make(JobState.RUNNING)
    assert made.attempt_id is not None
    job = str(made.id)
    async with engine.begin() as conn:
        assert await transitions.heartbeat(conn, made.id, made.attempt_id) == JobState.RUNNING
    async with engine.begin() as conn:
        error = error_doc("flaky", "again", retryable=True)
        await transitions.retry_later(
            conn, made.id, made.attempt_id, error=error, delay_seconds=0, actor=WORKER
        )
    async with engine.begin() as conn:
        await transitions.request_cancel(conn, made.id, actor=CLIENT)  # the sentinel
    await until_heard(heard, ("atlas_job_changed", job), 3)
    assert heard == [
        ("atlas_work", made.kind),  # created queued: the workers wake, no reader does
        ("atlas_job_changed", job),  # claimed (the heartbeat after it is silent)
        ("atlas_job_changed", job),  # back to queued for a retry
        ("atlas_work", made.kind),
        ("atlas_job_changed", job),  # canceled
    ]


async def test_one_statement_announces_its_jobs_in_one_batched_payload(
    engine: AsyncEngine, transitions: Transitions, heard: Heard
) -> None:
    """A claim of several jobs is one notification whose payload lists every job id."""
    from atlas_jobs._app.transitions import NewJob

    new = NewJob(
        owner="alice",
        kind="test.batched",
        kind_version=1,
        input={},
        max_attempts=3,
        max_elapsed_seconds=60,
    )
    async with engine.begin() as conn:
        created = [(await transitions.create(conn, new, actor=CLIENT)).job.id for _ in range(3)]
    async with engine.begin() as conn:
        claimed = await transitions.claim(
            conn, worker_id="w-batch", handlers=["test.batched@1"], limit=10
        )
    assert {row.id for row in claimed} == set(created)
    expected = {str(job_id) for job_id in created}
    for _ in range(1000):
        batched = [p for c, p in heard if c == "atlas_job_changed" and "," in p]
        if batched:
            break
        await asyncio.sleep(0.005)
    assert len(batched) == 1, heard
    assert set(batched[0].split(",")) == expected


async def test_a_creation_wakes_the_workers_once_per_kind_and_no_reader(
    engine: AsyncEngine, transitions: Transitions, heard: Heard
) -> None:
    """One statement creating jobs of two kinds: one ``atlas_work`` per kind, nothing on
    ``atlas_job_changed``; a later cancel (the sentinel) is announced there as ever."""
    from atlas_jobs._app.transitions import NewJob

    def new(kind: str) -> NewJob:
        return NewJob(
            owner="alice",
            kind=kind,
            kind_version=1,
            input={},
            max_attempts=3,
            max_elapsed_seconds=60,
        )

    batch = [new("test.one"), new("test.two"), new("test.one")]
    async with engine.begin() as conn:
        created = await transitions.create_many(conn, batch, actor=CLIENT)
    async with engine.begin() as conn:
        await transitions.request_cancel(conn, created[0].job.id, actor=CLIENT)
    sentinel = ("atlas_job_changed", str(created[0].job.id))
    await until_heard(heard, sentinel, 1)
    assert sorted(heard[:-1]) == [("atlas_work", "test.one"), ("atlas_work", "test.two")]
    assert heard[-1] == sentinel
