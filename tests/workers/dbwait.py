"""Database-side helpers for worker tests: make jobs, and wait for states with a deadline.

Waiting polls the database (the source of truth) until a condition holds or the
deadline passes; a timeout fails the test with what was last seen.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.schema import attempts, job_history, job_stages, jobs
from atlas_jobs._app.kinds import KINDS
from atlas_jobs._app.lifecycle import TERMINAL_STATES, JobState, Reason
from atlas_jobs._app.transitions import Actor, NewJob, Transitions

CLIENT = Actor("client", "tester")
T = TypeVar("T")


def bundle_input(preset: str, pages: Sequence[str] = ("cover", "summary")) -> dict[str, Any]:
    return {"preset": preset, "pages": list(pages), "format": "text-bundle-v1"}


def new_job(kind: str, job_input: dict[str, Any], owner: str = "alice") -> NewJob:
    spec = KINDS[kind]
    return NewJob(
        owner=owner,
        kind=kind,
        kind_version=spec.version,
        input=job_input,
        max_attempts=spec.max_attempts,
        max_elapsed_seconds=spec.max_elapsed_seconds,
    )


async def create_job(
    engine: AsyncEngine, transitions: Transitions, kind: str, job_input: dict[str, Any]
) -> uuid.UUID:
    async with engine.begin() as conn:
        created = await transitions.create(conn, new_job(kind, job_input), actor=CLIENT)
    job_id: uuid.UUID = created.job.id
    return job_id


async def create_bundle(
    engine: AsyncEngine, transitions: Transitions, preset: str, **kwargs: Any
) -> uuid.UUID:
    return await create_job(engine, transitions, "atlas.bundle", bundle_input(preset, **kwargs))


async def create_many(engine: AsyncEngine, kind: str, inputs: Iterable[dict[str, Any]]) -> int:
    """Bulk-insert queued jobs with their creation history (fast setup for big tests)."""
    spec = KINDS[kind]
    rows = [
        {
            "id": uuid.uuid4(),
            "owner": "bulk",
            "kind": kind,
            "kind_version": spec.version,
            "input": job_input,
            "state": JobState.QUEUED.value,
            "reason": Reason.NEW.value,
            "max_attempts": spec.max_attempts,
            "max_elapsed_seconds": spec.max_elapsed_seconds,
        }
        for job_input in inputs
    ]
    async with engine.begin() as conn:
        await conn.execute(insert(jobs), rows)
        await conn.execute(
            insert(job_history),
            [
                {
                    "job_id": r["id"],
                    "transition": "create",
                    "to_state": JobState.QUEUED.value,
                    "reason": Reason.NEW.value,
                    "actor": str(CLIENT),
                }
                for r in rows
            ],
        )
    return len(rows)


async def eventually(
    probe: Callable[[], Awaitable[T]],
    done: Callable[[T], bool],
    *,
    timeout: float,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {value!r}")
        await asyncio.sleep(interval)


async def job_row(engine: AsyncEngine, job_id: uuid.UUID) -> Any:
    async with engine.connect() as conn:
        return (await conn.execute(select(jobs).where(jobs.c.id == job_id))).one()


async def wait_for_state(
    engine: AsyncEngine, job_id: uuid.UUID, *states: JobState, timeout: float = 30
) -> Any:
    wanted = {s.value for s in states}
    return await eventually(
        lambda: job_row(engine, job_id),
        lambda row: row.state in wanted,
        timeout=timeout,
        what=f"job {job_id} in {sorted(wanted)}",
    )


async def wait_for(
    engine: AsyncEngine, job_id: uuid.UUID, check: Callable[[Any], bool], *, timeout: float = 30
) -> Any:
    return await eventually(
        lambda: job_row(engine, job_id), check, timeout=timeout, what=f"job {job_id}"
    )


async def state_counts(engine: AsyncEngine) -> dict[str, int]:
    async with engine.connect() as conn:
        rows = await conn.execute(select(jobs.c.state, func.count()).group_by(jobs.c.state))
        return {state: count for state, count in rows}


async def wait_all_terminal(engine: AsyncEngine, *, timeout: float) -> dict[str, int]:
    terminal = {s.value for s in TERMINAL_STATES}
    return await eventually(
        lambda: state_counts(engine),
        lambda counts: set(counts) <= terminal,
        timeout=timeout,
        interval=0.2,
        what="every job terminal",
    )


async def history(engine: AsyncEngine, job_id: uuid.UUID) -> list[Any]:
    async with engine.connect() as conn:
        return list(
            await conn.execute(
                select(job_history)
                .where(job_history.c.job_id == job_id)
                .order_by(job_history.c.seq)
            )
        )


async def attempt_rows(engine: AsyncEngine, job_id: uuid.UUID) -> list[Any]:
    async with engine.connect() as conn:
        return list(
            await conn.execute(
                select(attempts).where(attempts.c.job_id == job_id).order_by(attempts.c.number)
            )
        )


async def stage_rows(engine: AsyncEngine, job_id: uuid.UUID) -> dict[str, Any]:
    async with engine.connect() as conn:
        rows = await conn.execute(select(job_stages).where(job_stages.c.job_id == job_id))
        return {r.name: r for r in rows}
