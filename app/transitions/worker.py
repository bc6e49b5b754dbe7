"""Moves a worker makes for the attempt it holds: claim, lease, progress, endings,
publication. All but the claim are fenced by the attempt id (the fencing token)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Row, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app import metrics
from atlas_jobs._app.db import driver
from atlas_jobs._app.db.moves import Actor, Applied, MoveResult, Rejected, Step, held_by
from atlas_jobs._app.db.queries import (
    CLAIM,
    CLAIM_TO_RUN,
    CLAIM_TO_RUN_AT,
    LEASE_FACTS,
    LOCK_FOR_PUBLICATION,
    RECORD_UNIT,
)
from atlas_jobs._app.db.records import ClaimedJob
from atlas_jobs._app.db.schema import job_stages
from atlas_jobs._app.lifecycle import (
    TRANSITIONS,
    ActorKind,
    DeliveryState,
    JobState,
    Reason,
    TransitionName,
    budget_verdict,
)
from atlas_jobs._app.transitions.base import Service


class WorkerMoves(Service):
    # -- claiming -----------------------------------------------------------------------

    async def claim(
        self,
        conn: AsyncConnection,
        *,
        worker_id: str,
        handlers: Sequence[str],
        limit: int,
    ) -> list[Row[Any]]:
        """Claim up to ``limit`` queued jobs in one statement; each gets a new attempt.
        The claimed jobs' whole rows, in claim order.

        ``handlers`` are ``"kind@version"`` keys this worker can run; other jobs stay
        queued, visible, for a worker that can."""
        claimed = list(
            (await conn.execute(CLAIM, self._claim_params(worker_id, handlers, limit))).all()
        )
        metrics.record_claims(
            (row.kind, row.state, row.updated_at, row.available_at) for row in claimed
        )
        return claimed

    async def claim_to_run(
        self,
        conn: AsyncConnection,
        *,
        worker_id: str,
        handlers: Sequence[str],
        limit: int,
    ) -> list[ClaimedJob]:
        """:meth:`claim` as the worker pool makes it: the same statement answering only
        what starting each attempt needs, sent straight to the driver
        (:mod:`atlas_jobs._app.db.driver`) on ``conn``, an autocommit connection
        (:func:`~atlas_jobs._app.db.engine.single_statements`)."""
        rows = await driver.fetch(
            conn, CLAIM_TO_RUN, self._claim_params(worker_id, handlers, limit)
        )
        kind, state = CLAIM_TO_RUN_AT["kind"], CLAIM_TO_RUN_AT["state"]
        claimed_at, since = CLAIM_TO_RUN_AT["updated_at"], CLAIM_TO_RUN_AT["available_at"]
        metrics.record_claims((r[kind], r[state], r[claimed_at], r[since]) for r in rows)
        return [ClaimedJob.from_claim(row) for row in rows]

    def _claim_params(self, worker_id: str, handlers: Sequence[str], limit: int) -> dict[str, Any]:
        return {
            "worker_id": worker_id,
            "actor": str(Actor(ActorKind.WORKER, worker_id)),
            "handlers": list(handlers),
            "limit": limit,
            "lease_seconds": self.lease_seconds,
            **self.clock.bind(),
        }

    # -- the lease ------------------------------------------------------------------------

    async def heartbeat(
        self, conn: AsyncConnection, job_id: uuid.UUID, attempt_id: uuid.UUID
    ) -> JobState | None:
        """:meth:`heartbeat_many` for one attempt; ``None`` also when its row was locked
        by another transaction (a single beat has nobody to retry it)."""
        return (await self.heartbeat_many(conn, [(job_id, attempt_id)])).get(job_id)

    async def heartbeat_many(
        self, conn: AsyncConnection, held: Sequence[tuple[uuid.UUID, uuid.UUID]]
    ) -> dict[uuid.UUID, JobState | None]:
        """Extend the leases of many ``(job_id, attempt_id)`` pairs in one statement.

        Per job: its state when the lease was extended (a cancel request shows here),
        ``None`` when the lease is lost (the worker must stop). A job absent from the
        answer was locked by another transaction (a publication, a cancel): still held,
        try again on the next beat."""
        steps = [Step(job_id, attempt_id=attempt_id) for job_id, attempt_id in held]
        results = await self.executor.apply(
            conn,
            TRANSITIONS[TransitionName.HEARTBEAT],
            steps,
            actor=Actor(ActorKind.WORKER, "heartbeat"),
            full_rows=False,
        )
        states: dict[uuid.UUID, JobState | None] = {}
        for (job_id, attempt_id), result in zip(held, results, strict=True):
            if isinstance(result, Applied):
                states[job_id] = result.to_state
            elif result.job is None or not held_by(result.job, attempt_id):
                states[job_id] = None
        return states

    # -- progress (fenced; the state stays) -----------------------------------------------

    async def set_plan(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        attempt_id: uuid.UUID,
        stages: Sequence[tuple[str, str, int]],
        *,
        actor: Actor,
    ) -> MoveResult:
        """Declare the stages ``(name, unit, total)`` at plan revision 1, once per job.

        A retried attempt keeps the existing plan (and its done counts)."""
        outcome = await self.executor.apply_one(
            conn,
            TRANSITIONS[TransitionName.DECLARE_PLAN],
            Step(job_id, attempt_id=attempt_id),
            actor=actor,
        )
        if isinstance(outcome, Applied) and stages:
            await conn.execute(
                pg_insert(job_stages)
                .values(
                    [
                        {
                            "job_id": job_id,
                            "position": position,
                            "name": stage,
                            "unit": unit,
                            "total": total,
                            "plan_revision": 1,
                        }
                        for position, (stage, unit, total) in enumerate(stages)
                    ]
                )
                .on_conflict_do_nothing()
            )
        return outcome

    async def enter_stage(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        attempt_id: uuid.UUID,
        stage: str,
        *,
        actor: Actor,
    ) -> MoveResult:
        return await self.executor.apply_one(
            conn,
            TRANSITIONS[TransitionName.RECORD_PROGRESS],
            Step(job_id, attempt_id=attempt_id, stage=stage),
            actor=actor,
        )

    async def record_progress(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        attempt_id: uuid.UUID,
        stage: str,
        unit_name: str,
        *,
        actor: Actor,
        checkpoint: Mapping[str, Any] | None = None,
    ) -> MoveResult:
        """A unit of ``stage`` is done: a durable checkpoint, counted once however many
        attempts finish it -- one statement that records the checkpoint and counts it.

        Only a unit of a *declared* stage is recorded: a stage's ``done`` always equals its
        distinct checkpoints. (A unit reported before its stage's plan used to be kept but
        never counted, so the same unit reported again after the plan counted nothing: the
        lifecycle state machine found it.)"""
        outcome = await self.enter_stage(conn, job_id, attempt_id, stage, actor=actor)
        if isinstance(outcome, Applied):
            await conn.execute(
                RECORD_UNIT,
                {
                    "job_id": job_id,
                    "stage": stage,
                    "unit_name": unit_name,
                    "attempt_id": attempt_id,
                    "data": json.dumps(dict(checkpoint)) if checkpoint else None,
                    **self.clock.bind(),
                },
            )
        return outcome

    async def expand_plan(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        attempt_id: uuid.UUID,
        stage: str,
        new_total: int,
        *,
        actor: Actor,
    ) -> MoveResult:
        """A stage found more units: ``total`` grows, ``plan_revision`` increments, done
        units are kept. Recorded in history (a running -> running move)."""
        current = (
            await conn.execute(
                select(job_stages.c.total).where(
                    job_stages.c.job_id == job_id, job_stages.c.name == stage
                )
            )
        ).first()
        if current is not None and current.total >= new_total:
            # Already expanded (a retried attempt rediscovers the same units): nothing
            # changes, so nothing is written and the version stays; only the fence is
            # checked (a heartbeat-like beat that also extends the lease).
            beat = await self.executor.apply_one(
                conn,
                TRANSITIONS[TransitionName.HEARTBEAT],
                Step(job_id, attempt_id=attempt_id),
                actor=actor,
            )
            if isinstance(beat, Applied):
                return Applied(TransitionName.EXPAND_PLAN, beat.from_state, beat.to_state, beat.job)
            return Rejected(TransitionName.EXPAND_PLAN, beat.reason, beat.current, beat.job)
        outcome = await self.executor.apply_one(
            conn,
            TRANSITIONS[TransitionName.EXPAND_PLAN],
            Step(
                job_id,
                attempt_id=attempt_id,
                stage=stage,
                data={"stage": stage, "total": new_total},
            ),
            actor=actor,
        )
        if isinstance(outcome, Applied):
            await conn.execute(
                update(job_stages)
                .where(job_stages.c.job_id == job_id, job_stages.c.name == stage)
                .values(
                    total=new_total,
                    plan_revision=outcome.job.plan_revision,
                    updated_at=self.clock.now(),
                )
            )
        return outcome

    async def stage_output(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        attempt_id: uuid.UUID,
        delivery: DeliveryState,
        *,
        actor: Actor,
    ) -> MoveResult:
        """Private outputs moved on (``partial_private`` -> ``staged_private``); staying
        put is fine, any other delivery move is refused as illegal."""
        spec = TRANSITIONS[TransitionName.STAGE_OUTPUT]
        if delivery not in spec.delivery:
            raise ValueError(f"stage_output moves private outputs only, not to {delivery}")
        return await self.executor.apply_one(
            conn, spec, Step(job_id, attempt_id=attempt_id, delivery=delivery), actor=actor
        )

    # -- ending an attempt ------------------------------------------------------------------

    async def recover(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        attempt_id: uuid.UUID,
        *,
        error: Mapping[str, Any],
        delay_seconds: float,
        actor: Actor,
    ) -> MoveResult:
        """A recoverable error ended the attempt: :meth:`retry_later` while the budget
        lasts (:func:`~atlas_jobs._app.lifecycle.budget_verdict` on database time), else
        :meth:`give_up` -- the rule the reaper applies to a lost lease too."""
        facts = (
            await conn.execute(LEASE_FACTS, {"job_ids": [job_id], **self.clock.bind()})
        ).first()
        verdict = None
        if facts is not None and facts.current_attempt_id == attempt_id:
            verdict = budget_verdict(
                charged_attempts=facts.charged_attempts,
                max_attempts=facts.max_attempts,
                elapsed_seconds=facts.elapsed_seconds,
                max_elapsed_seconds=facts.max_elapsed_seconds,
                delay_seconds=delay_seconds,
            )
        if verdict is None:
            return await self.retry_later(
                conn, job_id, attempt_id, error=error, delay_seconds=delay_seconds, actor=actor
            )
        return await self.give_up(
            conn, job_id, attempt_id, error=error, reason=verdict, actor=actor
        )

    async def retry_later(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        attempt_id: uuid.UUID,
        *,
        error: Mapping[str, Any],
        delay_seconds: float,
        actor: Actor,
    ) -> MoveResult:
        return await self.executor.apply_one(
            conn,
            TRANSITIONS[TransitionName.RETRY_LATER],
            Step(
                job_id,
                attempt_id=attempt_id,
                error=error,
                seconds=delay_seconds,
                data={"error": dict(error), "delay_seconds": delay_seconds},
            ),
            actor=actor,
        )

    async def release(
        self, conn: AsyncConnection, job_id: uuid.UUID, attempt_id: uuid.UUID, *, actor: Actor
    ) -> MoveResult:
        """Graceful shutdown: back to ``queued`` without charging the attempt."""
        return await self.executor.apply_one(
            conn,
            TRANSITIONS[TransitionName.RELEASE],
            Step(job_id, attempt_id=attempt_id, note="worker shutting down; attempt not charged"),
            actor=actor,
        )

    async def give_up(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        attempt_id: uuid.UUID,
        *,
        error: Mapping[str, Any],
        reason: Reason,
        actor: Actor,
    ) -> MoveResult:
        return await self.executor.apply_one(
            conn,
            TRANSITIONS[TransitionName.GIVE_UP],
            Step(
                job_id,
                attempt_id=attempt_id,
                reason=reason,
                error=error,
                data={"error": dict(error)},
            ),
            actor=actor,
        )

    async def wait(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        attempt_id: uuid.UUID,
        *,
        reason: Reason,
        deadline_seconds: float,
        on_deadline: str,
        actor: Actor,
    ) -> MoveResult:
        if on_deadline not in {"fail", "escalate"}:
            raise ValueError("on_deadline must be 'fail' or 'escalate'")
        return await self.executor.apply_one(
            conn,
            TRANSITIONS[TransitionName.WAIT],
            Step(
                job_id,
                attempt_id=attempt_id,
                reason=reason,
                seconds=deadline_seconds,
                rule=on_deadline,
                data={"deadline_seconds": deadline_seconds, "on_deadline": on_deadline},
            ),
            actor=actor,
        )

    async def stop_canceled(
        self, conn: AsyncConnection, job_id: uuid.UUID, attempt_id: uuid.UUID, *, actor: Actor
    ) -> MoveResult:
        return await self.executor.apply_one(
            conn,
            TRANSITIONS[TransitionName.STOP_CANCELED],
            Step(job_id, attempt_id=attempt_id),
            actor=actor,
        )

    async def fail(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        attempt_id: uuid.UUID,
        *,
        error: Mapping[str, Any],
        actor: Actor,
    ) -> MoveResult:
        return await self.executor.apply_one(
            conn,
            TRANSITIONS[TransitionName.FAIL],
            Step(job_id, attempt_id=attempt_id, error=error, data={"error": dict(error)}),
            actor=actor,
        )

    # -- publication ------------------------------------------------------------------------

    async def lock_for_publication(
        self, conn: AsyncConnection, job_id: uuid.UUID, attempt_id: uuid.UUID
    ) -> bool:
        """Take the job row lock that serializes publication against cancellation.

        True when this attempt still holds a live lease on a publishable job; from here
        until commit no cancel can slip in, so the publication cannot be interrupted."""
        row = (
            await conn.execute(
                LOCK_FOR_PUBLICATION,
                {"job_id": job_id, "attempt_id": attempt_id, **self.clock.bind()},
            )
        ).first()
        return row is not None

    async def publish(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        attempt_id: uuid.UUID,
        *,
        result_ref: Mapping[str, Any],
        ttl_seconds: float,
        actor: Actor,
    ) -> MoveResult:
        """Commit ``succeeded`` + ``available``. Call :meth:`lock_for_publication` first
        in the same transaction, make the result owner-retrievable, then call this."""
        [outcome] = await self.publish_many(
            conn,
            [(job_id, attempt_id)],
            result_ref=result_ref,
            ttl_seconds=ttl_seconds,
            actor=actor,
        )
        return outcome

    async def publish_many(
        self,
        conn: AsyncConnection,
        held: Sequence[tuple[uuid.UUID, uuid.UUID]],
        *,
        result_ref: Mapping[str, Any],
        ttl_seconds: float,
        actor: Actor,
        explain_refusals: bool = True,
    ) -> list[MoveResult]:
        """:meth:`publish` for many ``(job_id, attempt_id)`` in one statement (history and
        attempts included): the group commit of results without files. A concurrent
        cancel on one of the rows is waited for, in id order, and then loses.
        ``explain_refusals=False`` (the completer): refusals are not classified and an
        ``Applied`` carries only the row's id, state and version."""
        steps = [
            Step(job_id, attempt_id=attempt_id, result_ref=result_ref, seconds=ttl_seconds)
            for job_id, attempt_id in held
        ]
        return await self.executor.apply(
            conn,
            TRANSITIONS[TransitionName.PUBLISH],
            steps,
            actor=actor,
            explain_refusals=explain_refusals,
            # A group commit only needs to know which jobs moved.
            full_rows=explain_refusals,
        )
