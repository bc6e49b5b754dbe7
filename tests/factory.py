"""A factory that puts a job in any state, through the real transitions."""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.schema import jobs as jobs_table
from atlas_jobs._app.kinds import handler_key
from atlas_jobs._app.lifecycle import JobState, Reason
from atlas_jobs._app.transitions import Actor, Applied, NewJob, Transitions, error_doc

CLIENT = Actor("client", "tester")
WORKER = Actor("worker", "w-test")
_counter = itertools.count()


@dataclass(frozen=True)
class MadeJob:
    id: uuid.UUID
    kind: str
    attempt_id: uuid.UUID | None

    @property
    def handler(self) -> str:
        return handler_key(self.kind, 1)


class JobFactory:
    def __init__(self, engine: AsyncEngine, transitions: Transitions) -> None:
        self.engine = engine
        self.t = transitions

    async def row(self, job_id: uuid.UUID) -> Any:
        async with self.engine.connect() as conn:
            return (await conn.execute(select(jobs_table).where(jobs_table.c.id == job_id))).one()

    async def make(
        self,
        state: JobState = JobState.QUEUED,
        *,
        owner: str = "alice",
        max_attempts: int = 3,
        input: dict[str, Any] | None = None,
        tags: tuple[str, ...] = (),
    ) -> MadeJob:
        kind = f"test.kind{next(_counter)}"  # unique, so a claim picks exactly this job
        new = NewJob(
            owner=owner,
            kind=kind,
            kind_version=1,
            input=input or {},
            max_attempts=max_attempts,
            max_elapsed_seconds=3600,
            tags=tags,
        )
        async with self.engine.begin() as conn:
            created = await self.t.create(conn, new, actor=CLIENT)
        job_id = created.job.id
        if state == JobState.QUEUED:
            return MadeJob(job_id, kind, None)
        if state == JobState.CANCELED:
            async with self.engine.begin() as conn:
                assert (await self.t.request_cancel(conn, job_id, actor=CLIENT)).ok
            return MadeJob(job_id, kind, None)
        async with self.engine.begin() as conn:
            [claimed] = await self.t.claim(
                conn, worker_id="w-test", handlers=[handler_key(kind, 1)], limit=1
            )
        attempt = claimed.current_attempt_id
        made = MadeJob(job_id, kind, attempt)
        async with self.engine.begin() as conn:
            outcome: Any = None
            if state == JobState.RUNNING:
                return made
            if state == JobState.CANCEL_REQUESTED:
                outcome = await self.t.request_cancel(conn, job_id, actor=CLIENT)
            elif state == JobState.SUCCEEDED:
                assert await self.t.lock_for_publication(conn, job_id, attempt)
                outcome = await self.t.publish(
                    conn, job_id, attempt, result_ref={"files": []}, ttl_seconds=60, actor=WORKER
                )
            elif state == JobState.FAILED:
                outcome = await self.t.fail(
                    conn,
                    job_id,
                    attempt,
                    error=error_doc("boom", "permanent", retryable=False),
                    actor=WORKER,
                )
            elif state == JobState.UNRESOLVED:
                outcome = await self.t.give_up(
                    conn,
                    job_id,
                    attempt,
                    error=error_doc("flaky", "gave up", retryable=True),
                    reason=Reason.RETRIES_EXHAUSTED,
                    actor=WORKER,
                )
            elif state == JobState.WAITING:
                outcome = await self.t.wait(
                    conn,
                    job_id,
                    attempt,
                    reason=Reason.REVIEW,
                    deadline_seconds=3600,
                    on_deadline="fail",
                    actor=WORKER,
                )
            assert isinstance(outcome, Applied), outcome
        return made
