"""Moves made by the maintenance loops: the reaper (lost leases), the sweeper (result
retention, wait deadlines)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.db.moves import Applied, MoveResult, Rejected, RejectReason, Step
from atlas_jobs._app.db.queries import LEASE_FACTS
from atlas_jobs._app.db.records import LeaseFacts
from atlas_jobs._app.lifecycle import (
    ACTIVE_STATES,
    TRANSITIONS,
    JobState,
    Reason,
    TransitionName,
    budget_verdict,
)
from atlas_jobs._app.transitions.base import SYSTEM_REAPER, SYSTEM_SWEEPER, Service, error_doc

LEASE_EXPIRED_ERROR = error_doc(
    "lease_expired", "the worker holding the job stopped heartbeating", retryable=True
)
DEADLINE_ERROR = error_doc("deadline_passed", "the wait's deadline passed", retryable=False)
START_DEADLINE_ERROR = error_doc(
    "start_deadline_passed", "no worker started the job by its start_by", retryable=False
)

Backoff = Callable[[str, int], float]
"""Seconds before the next attempt of a job of ``kind`` after attempt ``attempt``."""


class MaintenanceMoves(Service):
    async def rescue(
        self, conn: AsyncConnection, job_id: uuid.UUID, *, backoff_seconds: float
    ) -> MoveResult:
        """The reaper takes back one job whose lease expired: see :meth:`rescue_locked`."""
        facts = (
            await conn.execute(LEASE_FACTS, {"job_ids": [job_id], **self.clock.bind()})
        ).first()
        if facts is None:
            return Rejected(TransitionName.RESCUE, RejectReason.NOT_FOUND)
        if JobState(facts.state) not in ACTIVE_STATES or not facts.lease_expired:
            return Rejected(TransitionName.RESCUE, RejectReason.ILLEGAL, JobState(facts.state))
        [outcome] = await self.rescue_locked(
            conn, [LeaseFacts.from_row(facts)], lambda _k, _a: backoff_seconds
        )
        return outcome

    async def rescue_locked(
        self, conn: AsyncConnection, expired: Sequence[LeaseFacts], backoff: Backoff
    ) -> list[MoveResult]:
        """Rescue jobs whose lease expired, already locked with their budget facts
        (:data:`~atlas_jobs._app.db.queries.EXPIRED_LEASES`): ``running`` -> ``queued`` while the
        budget lasts (:func:`~atlas_jobs._app.lifecycle.budget_verdict`, the rule a worker's retry
        follows too), else ``unresolved``; ``cancel_requested`` -> ``canceled``. One
        statement per transition, whatever the batch size."""
        rescue: list[Step] = []
        exhausted: list[Step] = []
        for job in expired:
            delay = backoff(job.kind, job.attempt)
            verdict = None
            if JobState(job.state) == JobState.RUNNING:
                verdict = budget_verdict(
                    charged_attempts=job.charged_attempts,
                    max_attempts=job.max_attempts,
                    elapsed_seconds=job.elapsed_seconds,
                    max_elapsed_seconds=job.max_elapsed_seconds,
                    delay_seconds=delay,
                )
            step = Step(
                job.id,
                error=LEASE_EXPIRED_ERROR,
                seconds=delay,
                data={"error": LEASE_EXPIRED_ERROR},
                reason=None if verdict in (None, Reason.RETRIES_EXHAUSTED) else verdict,
            )
            (rescue if verdict is None else exhausted).append(step)
        found: dict[uuid.UUID, MoveResult] = {}
        for name, steps in (
            (TransitionName.RESCUE, rescue),
            (TransitionName.RESCUE_EXHAUSTED, exhausted),
        ):
            results = await self.executor.apply(conn, TRANSITIONS[name], steps, actor=SYSTEM_REAPER)
            found.update({step.job_id: result for step, result in zip(steps, results, strict=True)})
        return [found[job.id] for job in expired]

    async def expire_result(self, conn: AsyncConnection, job_id: uuid.UUID) -> MoveResult:
        """Retention passed: delivery ``available`` -> ``expired``; state unchanged."""
        [outcome] = await self.expire_results(conn, [job_id])
        return outcome

    async def expire_results(
        self, conn: AsyncConnection, job_ids: Sequence[uuid.UUID], *, full_rows: bool = True
    ) -> list[MoveResult]:
        """:meth:`expire_result` for many jobs in one statement. ``full_rows=False`` (the
        sweeper, which only needs to know which moved): an ``Applied`` carries only the
        row's id, state and version, not the whole job row."""
        return await self.executor.apply(
            conn,
            TRANSITIONS[TransitionName.EXPIRE_RESULT],
            [Step(job_id, note="result retention passed; files removed") for job_id in job_ids],
            actor=SYSTEM_SWEEPER,
            full_rows=full_rows,
        )

    async def pass_deadline(self, conn: AsyncConnection, job_id: uuid.UUID) -> MoveResult:
        """A waiting job's deadline passed: apply its rule -- ``fail`` (``failed``,
        reason ``deadline_passed``) or ``escalate`` (``unresolved``, an operator decides)."""
        [outcome] = await self.pass_deadlines(conn, [job_id])
        return outcome

    async def pass_deadlines(
        self, conn: AsyncConnection, job_ids: Sequence[uuid.UUID]
    ) -> list[MoveResult]:
        """Each job goes by its own rule: both guarded transitions are tried, and exactly
        one of them can match a job (their guards exclude each other)."""
        escalate = {**DEADLINE_ERROR, "retryable": True}
        failed = await self.executor.apply(
            conn,
            TRANSITIONS[TransitionName.DEADLINE_FAIL],
            [Step(j, error=DEADLINE_ERROR, data={"error": DEADLINE_ERROR}) for j in job_ids],
            actor=SYSTEM_SWEEPER,
            explain_refusals=False,
        )
        rest = [j for j, r in zip(job_ids, failed, strict=True) if not isinstance(r, Applied)]
        escalated = await self.executor.apply(
            conn,
            TRANSITIONS[TransitionName.DEADLINE_ESCALATE],
            [Step(j, error=escalate, data={"error": DEADLINE_ERROR}) for j in rest],
            actor=SYSTEM_SWEEPER,
        )
        found: dict[uuid.UUID, MoveResult] = dict(zip(rest, escalated, strict=True))
        found.update({j: r for j, r in zip(job_ids, failed, strict=True) if isinstance(r, Applied)})
        return [
            _renamed(found[j], TransitionName.DEADLINE_FAIL)
            if not isinstance(found[j], Applied)
            else found[j]
            for j in job_ids
        ]

    async def miss_starts(
        self, conn: AsyncConnection, job_ids: Sequence[uuid.UUID]
    ) -> list[MoveResult]:
        """Queued jobs never claimed by their ``start_by`` end: ``failed``, reason
        ``start_deadline_passed``, in one statement (no attempt was ever opened)."""
        return await self.executor.apply(
            conn,
            TRANSITIONS[TransitionName.MISS_START],
            [
                Step(j, error=START_DEADLINE_ERROR, data={"error": START_DEADLINE_ERROR})
                for j in job_ids
            ],
            actor=SYSTEM_SWEEPER,
        )


def _renamed(result: MoveResult, name: TransitionName) -> MoveResult:
    if isinstance(result, Rejected):
        return Rejected(name, result.reason, result.current, result.job)
    return result
