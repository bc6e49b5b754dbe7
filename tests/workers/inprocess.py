"""In-process harness for the worker engine: real PostgreSQL, fake handlers, test clock.

``Harness`` creates jobs of a fake kind, claims them through the real ``claim``
statement and builds runners and contexts exactly as the pool does -- only the
handlers are fakes, and time moves with :meth:`Clock.advance`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.engine import single_statements
from atlas_jobs._app.db.schema import attempts, job_checkpoints, job_history, job_stages, jobs
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.storage import FilesystemStore
from atlas_jobs._app.transitions import Actor, NewJob, Transitions
from atlas_jobs._workers.completer import Completer
from atlas_jobs._workers.context import JobContext
from atlas_jobs._workers.handlers.base import Handler, PublishPlan
from atlas_jobs._workers.reaper import Reaper
from atlas_jobs._workers.runner import JobRunner

KIND = "test.fake"
KEY = f"{KIND}@1"
OTHER_KIND = "test.unserved"
CLIENT = Actor("client", "tester")
WORKER_ID = "w-inproc"
LEASE = 30  # the ``transitions`` fixture's lease
WAIT = 20.0
"""Upper bound of every wait in these tests (a loaded 2-core machine); never a timing
assertion, only a guard against hanging."""

T = TypeVar("T")


async def listening_workers(engine: AsyncEngine) -> int:
    """Worker processes (or pools) whose LISTEN connection is up on this engine's database."""
    async with engine.connect() as conn:
        return int(
            (
                await conn.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE application_name = 'atlas-listener' "
                        "AND datname = current_database()"
                    )
                )
            ).scalar_one()
        )


async def not_run(ctx: JobContext) -> PublishPlan:
    """The handler of a runner used only to claim and build contexts."""
    raise AssertionError(f"job {ctx.job_id} was not meant to run")


@dataclass
class Harness:
    engine: AsyncEngine
    transitions: Transitions
    clock: Clock
    store: FilesystemStore
    settings: Settings

    def runner(
        self,
        handlers: Mapping[str, Handler],
        *,
        worker_id: str = WORKER_ID,
        completer: Completer | None = None,
    ) -> JobRunner:
        return JobRunner(
            engine=self.engine,
            transitions=self.transitions,
            store=self.store,
            settings=self.settings,
            handlers=handlers,
            actor=Actor("worker", worker_id),
            completer=completer,
        )

    async def create(
        self,
        kind: str = KIND,
        *,
        max_attempts: int = 3,
        max_elapsed_seconds: int = 3600,
        owner: str = "alice",
    ) -> uuid.UUID:
        new = NewJob(
            owner=owner,
            kind=kind,
            kind_version=1,
            input={"n": 1},
            max_attempts=max_attempts,
            max_elapsed_seconds=max_elapsed_seconds,
        )
        async with self.engine.begin() as conn:
            created = await self.transitions.create(conn, new, actor=CLIENT)
        job_id: uuid.UUID = created.job.id
        return job_id

    async def claim_all(
        self, runner: JobRunner, *, limit: int, worker_id: str = WORKER_ID
    ) -> list[JobContext]:
        """Claim through the real statement, then build contexts as the pool does."""
        async with single_statements(self.engine).connect() as conn:
            claimed = await self.transitions.claim_to_run(
                conn, worker_id=worker_id, handlers=sorted(runner.handlers), limit=limit
            )
        return [runner.context(job) for job in claimed]

    async def claim(self, runner: JobRunner, *, worker_id: str = WORKER_ID) -> JobContext:
        contexts = await self.claim_all(runner, limit=1, worker_id=worker_id)
        assert len(contexts) == 1, "nothing claimable"
        return contexts[0]

    async def steal(self, job_id: uuid.UUID, runner: JobRunner, *, worker_id: str) -> JobContext:
        """Let the lease run out, have the reaper take the job back and another worker
        claim it: the attempt that held it is now stale."""
        self.clock.advance(LEASE + 1)
        assert await Reaper(self.engine, self.transitions).run_once() == 1
        self.clock.advance(120)  # past the rescue's backoff (capped at 60 s)
        ctx = await self.claim(runner, worker_id=worker_id)
        assert ctx.job_id == job_id
        return ctx

    # -- reading the database -----------------------------------------------------------

    async def row(self, job_id: uuid.UUID) -> Any:
        async with self.engine.connect() as conn:
            return (await conn.execute(select(jobs).where(jobs.c.id == job_id))).one()

    async def attempts(self, job_id: uuid.UUID) -> list[Any]:
        async with self.engine.connect() as conn:
            return list(
                await conn.execute(
                    select(attempts).where(attempts.c.job_id == job_id).order_by(attempts.c.number)
                )
            )

    async def history(self, job_id: uuid.UUID) -> list[Any]:
        async with self.engine.connect() as conn:
            return list(
                await conn.execute(
                    select(job_history)
                    .where(job_history.c.job_id == job_id)
                    .order_by(job_history.c.seq)
                )
            )

    async def moves(self, job_id: uuid.UUID) -> list[tuple[str, str | None, str]]:
        return [(h.transition, h.from_state, h.to_state) for h in await self.history(job_id)]

    async def stages(self, job_id: uuid.UUID) -> dict[str, Any]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(job_stages).where(job_stages.c.job_id == job_id))
            return {r.name: r for r in rows}

    async def checkpoints(self, job_id: uuid.UUID) -> dict[tuple[str, str], Any]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(job_checkpoints).where(job_checkpoints.c.job_id == job_id)
            )
            return {(r.stage, r.unit_name): r for r in rows}

    async def snapshot(self, job_id: uuid.UUID) -> tuple[Any, ...]:
        """Everything an attempt could write: row, history, attempts, progress."""
        return (
            tuple(await self.row(job_id)),
            [tuple(r) for r in await self.history(job_id)],
            [tuple(r) for r in await self.attempts(job_id)],
            sorted(tuple(r) for r in (await self.stages(job_id)).values()),
            sorted(tuple(r) for r in (await self.checkpoints(job_id)).values()),
        )


async def bounded(awaitable: Awaitable[T], seconds: float = WAIT) -> T:
    """Await with an upper bound (a hang fails the test instead of the suite)."""
    async with asyncio.timeout(seconds):
        return await awaitable


async def until(
    probe: Callable[[], Awaitable[T]], done: Callable[[T], bool], *, seconds: float = WAIT
) -> T:
    """Poll ``probe`` until ``done`` holds, within ``seconds``."""
    async with asyncio.timeout(seconds):
        while True:
            value = await probe()
            if done(value):
                return value
            await asyncio.sleep(0.02)


@asynccontextmanager
async def running(coro: Awaitable[T]) -> AsyncIterator[asyncio.Task[T]]:
    """Run ``coro`` as a task for the block; a task still pending at exit is cancelled."""
    task: asyncio.Task[T] = asyncio.ensure_future(coro)
    try:
        yield task
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
