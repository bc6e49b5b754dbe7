"""One executor for one job and for many: the single call and the batched call of the
same transition leave identical rows, attempts and history (River's completer shape).

Each test makes twin jobs in the same state, moves one through the single call and the
others through one batched call, and compares everything but identities and times.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.queries import LEASE_FACTS
from atlas_jobs._app.db.schema import attempts, job_history, jobs
from atlas_jobs._app.lifecycle import JobState
from atlas_jobs._app.transitions import Applied, Transitions
from tests.factory import WORKER, JobFactory, MadeJob

IDENTITY = {"id", "seq", "kind", "input", "current_attempt_id", "worker_id", "job_id"}


def _shape(row: Any) -> dict[str, Any]:
    """A row without identities; times as "set or not" (they differ by microseconds)."""
    shaped = {}
    for key, value in row._mapping.items():
        if key in IDENTITY or key == "attempt_id":
            continue
        if key.endswith("_at") or key == "at":
            value = value is not None
        elif key == "cancel" and value:
            value = {**value, "requested_at": "set"}
        shaped[key] = value
    return shaped


async def traces(engine: AsyncEngine, job_id: uuid.UUID) -> dict[str, Any]:
    async with engine.connect() as conn:
        job = (await conn.execute(select(jobs).where(jobs.c.id == job_id))).one()
        tries = (
            await conn.execute(
                select(attempts).where(attempts.c.job_id == job_id).order_by(attempts.c.number)
            )
        ).all()
        history = (
            await conn.execute(
                select(job_history)
                .where(job_history.c.job_id == job_id)
                .order_by(job_history.c.seq)
            )
        ).all()
    return {
        "job": _shape(job),
        "attempts": [_shape(a) for a in tries],
        "history": [_shape(h) for h in history],
        "history_attempts": [h.attempt_id is not None for h in history],
    }


async def twins(jobs: JobFactory, state: JobState, count: int) -> list[MadeJob]:
    return [await jobs.make(state) for _ in range(count)]


async def test_publish_and_publish_many_agree(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    for state in (JobState.RUNNING, JobState.CANCEL_REQUESTED):
        single, *batch = await twins(jobs, state, 3)
        ref = {"files": []}
        async with engine.begin() as conn:
            assert single.attempt_id is not None
            one = await transitions.publish(
                conn, single.id, single.attempt_id, result_ref=ref, ttl_seconds=60, actor=WORKER
            )
            many = await transitions.publish_many(
                conn,
                [(m.id, m.attempt_id) for m in batch if m.attempt_id is not None],
                result_ref=ref,
                ttl_seconds=60,
                actor=WORKER,
            )
        assert isinstance(one, Applied)
        assert all(isinstance(r, Applied) for r in many)
        expected = await traces(engine, single.id)
        assert expected["job"]["state"] == JobState.SUCCEEDED
        for made in batch:
            assert await traces(engine, made.id) == expected, state


async def test_heartbeat_and_heartbeat_many_agree(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    single, *batch = await twins(jobs, JobState.RUNNING, 3)
    lost = await jobs.make(JobState.RUNNING)
    assert single.attempt_id is not None
    async with engine.begin() as conn:
        state = await transitions.heartbeat(conn, single.id, single.attempt_id)
        states = await transitions.heartbeat_many(
            conn,
            [(m.id, m.attempt_id) for m in batch if m.attempt_id is not None]
            + [(lost.id, uuid.uuid4())],
        )
    assert state == JobState.RUNNING
    assert states == {**{m.id: JobState.RUNNING for m in batch}, lost.id: None}
    expected = await traces(engine, single.id)
    for made in batch:
        assert await traces(engine, made.id) == expected


async def test_single_and_batched_claims_agree(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    """A claim of one and a claim of many write the same rows, attempts and history."""
    single = await jobs.make(JobState.QUEUED)
    batch = await jobs.make(JobState.QUEUED)
    async with engine.begin() as conn:
        [one] = await transitions.claim(conn, worker_id="w", handlers=[single.handler], limit=1)
        # Several handlers, a larger limit: one statement claims what it may.
        many = await transitions.claim(
            conn, worker_id="w", handlers=[batch.handler, "nobody@1"], limit=5
        )
    assert one.id == single.id
    assert [row.id for row in many] == [batch.id]
    assert await traces(engine, batch.id) == await traces(engine, single.id)


async def test_rescue_of_one_and_of_a_batch_agree(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory, clock: Any
) -> None:
    single, *batch = await twins(jobs, JobState.RUNNING, 3)
    clock.advance(31)  # past the fixture's 30 s lease
    async with engine.begin() as conn:
        one = await transitions.rescue(conn, single.id, backoff_seconds=0)
    async with engine.begin() as conn:
        facts = (
            await conn.execute(
                LEASE_FACTS, {"job_ids": [m.id for m in batch], **transitions.clock.bind()}
            )
        ).all()
        many = await transitions.rescue_locked(conn, facts, lambda _kind, _attempt: 0.0)
    assert isinstance(one, Applied)
    assert one.to_state == JobState.QUEUED
    assert all(isinstance(r, Applied) and r.to_state == JobState.QUEUED for r in many)
    expected = await traces(engine, single.id)
    for made in batch:
        assert await traces(engine, made.id) == expected
