"""The transition service: every state change of every job goes through here.

Each named transition of :data:`app.lifecycle.TRANSITIONS` is a compare-and-set on the
job row -- its state, and for worker transitions the attempt id (the fencing token) and a
live lease -- whose row count is checked, with the history row appended in the same
transaction. A move that is illegal, stale or aimed at a missing job returns
:class:`Rejected`; nothing is silently skipped and a terminal state is never rewritten.

Lock order (documented once, followed everywhere): the ``jobs`` row first, then its
``attempts``/``job_stages``/``job_checkpoints`` rows. Cancellation and publication both
start with ``SELECT ... FOR UPDATE`` on the job row, so they are serialized and exactly
one of them wins.

Callers own the transaction: pass an ``AsyncConnection`` inside ``engine.begin()``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    Row,
    and_,
    case,
    func,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from app.clock import Clock
from app.db.queries import CLAIM, HEARTBEAT_MANY, LEASE_STATUS, PUBLISH_MANY
from app.db.schema import attempts, job_checkpoints, job_history, job_stages, jobs
from app.lifecycle import (
    ACTIVE_STATES,
    CANCEL_TOO_LATE,
    DELIVERY_MOVES,
    TERMINAL_STATES,
    AttemptOutcome,
    DeliveryState,
    JobState,
    Reason,
    transition,
)


class RejectReason(StrEnum):
    NOT_FOUND = "not_found"
    ILLEGAL = "illegal"
    STALE_ATTEMPT = "stale_attempt"


@dataclass(frozen=True, slots=True)
class Applied:
    """The move happened; ``job`` is the row after it."""

    transition: str
    from_state: JobState | None
    to_state: JobState
    job: Row[Any]

    @property
    def ok(self) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class Rejected:
    """The move matched no row. ``current`` is the job's state when it exists."""

    transition: str
    reason: RejectReason
    current: JobState | None = None

    @property
    def ok(self) -> bool:
        return False


Outcome = Applied | Rejected


@dataclass(frozen=True, slots=True)
class Actor:
    """Who made a move: ``client:alice``, ``operator:ops``, ``worker:w-1``, ``system:reaper``."""

    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"


SYSTEM_REAPER = Actor("system", "reaper")
SYSTEM_SWEEPER = Actor("system", "sweeper")


@dataclass(frozen=True, slots=True)
class NewJob:
    owner: str
    kind: str
    kind_version: int
    input: Mapping[str, Any]
    max_attempts: int
    max_elapsed_seconds: int
    request_id: str | None = None
    idempotency_key: str | None = None
    replay_of: uuid.UUID | None = None


def error_doc(code: str, message: str, *, retryable: bool, **extra: Any) -> dict[str, Any]:
    """The error object of the status body: ``{code, message, retryable}``."""
    return {"code": code, "message": message, "retryable": retryable, **extra}


_BLOCK_PRIVATE_OUTPUTS = case(
    (
        jobs.c.delivery_state.in_(
            [DeliveryState.PARTIAL_PRIVATE.value, DeliveryState.STAGED_PRIVATE.value]
        ),
        literal(DeliveryState.BLOCKED.value),
    ),
    else_=jobs.c.delivery_state,
)
"""Failed or canceled work: private outputs become ``blocked`` (never published)."""

_LEASE_CLEARED: dict[str, Any] = {
    "current_attempt_id": None,
    "lease_expires_at": None,
    "worker_id": None,
}


class Transitions:
    """Named transitions over one clock. Stateless apart from the clock and lease length."""

    def __init__(self, clock: Clock, *, lease_seconds: float) -> None:
        self.clock = clock
        self.lease_seconds = lease_seconds

    # -- the one generic compare-and-set ---------------------------------------------

    async def _move(
        self,
        conn: AsyncConnection,
        name: str,
        job_id: uuid.UUID,
        *,
        actor: Actor,
        reason: Reason | None,
        attempt_id: uuid.UUID | None = None,
        owner: str | None = None,
        values: Mapping[str, Any] | None = None,
        end_attempt: AttemptOutcome | None = None,
        attempt_error: Mapping[str, Any] | None = None,
        event_id: str | None = None,
        note: str | None = None,
        data: Mapping[str, Any] | None = None,
        record: bool = True,
        delivery_to: DeliveryState | None = None,
    ) -> Outcome:
        spec = transition(name)
        now = self.clock.now()
        lock = select(
            jobs.c.state,
            jobs.c.delivery_state,
            jobs.c.current_attempt_id,
            (jobs.c.lease_expires_at > now).label("lease_live"),
        ).where(jobs.c.id == job_id)
        if owner is not None:
            lock = lock.where(jobs.c.owner == owner)
        current = (await conn.execute(lock.with_for_update())).first()
        if current is None:
            return Rejected(name, RejectReason.NOT_FOUND)
        source = JobState(current.state)
        target = spec.target(source)
        if target is None:
            return Rejected(name, RejectReason.ILLEGAL, source)
        if spec.fenced and (current.current_attempt_id != attempt_id or not current.lease_live):
            return Rejected(name, RejectReason.STALE_ATTEMPT, source)
        if delivery_to is not None and not _delivery_may_move(current.delivery_state, delivery_to):
            # e.g. publishing a partial package: partial outputs are never published.
            return Rejected(name, RejectReason.ILLEGAL, source)

        sets: dict[str, Any] = {"version": jobs.c.version + 1, "updated_at": now}
        if target != source:
            sets["state"] = target.value
            sets["reason"] = (reason or _default_reason(target)).value
        if target in TERMINAL_STATES and source not in TERMINAL_STATES:
            sets["finished_at"] = now
        if source in ACTIVE_STATES and target not in ACTIVE_STATES:
            sets.update(_LEASE_CLEARED)
        if source == JobState.WAITING and target != JobState.WAITING:
            sets.update(wait_deadline_at=None, wait_on_deadline=None)
        if target in {JobState.FAILED, JobState.CANCELED} and source not in TERMINAL_STATES:
            sets["delivery_state"] = _BLOCK_PRIVATE_OUTPUTS
        sets.update(values or {})

        # The compare-and-set proper: the row is locked, but the guard still states the
        # whole precondition, so a logic error shows up as a zero row count, not a write.
        guard = [jobs.c.id == job_id, jobs.c.state == source.value]
        if spec.fenced:
            guard += [jobs.c.current_attempt_id == attempt_id, jobs.c.lease_expires_at > now]
        moved = (
            await conn.execute(update(jobs).where(and_(*guard)).values(sets).returning(*jobs.c))
        ).first()
        if moved is None:  # pragma: no cover - the lock above makes this unreachable
            raise RuntimeError(f"{name} on {job_id}: compare-and-set matched no row under lock")

        if end_attempt is not None and current.current_attempt_id is not None:
            await conn.execute(
                update(attempts)
                .where(attempts.c.id == current.current_attempt_id)
                .values(outcome=end_attempt.value, ended_at=now, error=attempt_error)
            )
        if record:
            await conn.execute(
                insert(job_history).values(
                    job_id=job_id,
                    at=now,
                    transition=name,
                    from_state=source.value,
                    to_state=target.value,
                    reason=moved.reason,
                    actor=str(actor),
                    attempt_id=current.current_attempt_id if spec.fenced else attempt_id,
                    event_id=event_id,
                    note=note,
                    data=dict(data) if data else None,
                )
            )
        return Applied(name, source, target, moved)

    # -- creation ---------------------------------------------------------------------

    async def create(self, conn: AsyncConnection, new: NewJob, *, actor: Actor) -> Applied:
        return await self._insert(conn, "create", new, actor=actor)

    async def replay(
        self, conn: AsyncConnection, job_id: uuid.UUID, *, actor: Actor, note: str | None = None
    ) -> Outcome:
        """A terminal job runs again as a **new** job with ``replay_of`` set."""
        old = (
            await conn.execute(select(jobs).where(jobs.c.id == job_id).with_for_update())
        ).first()
        if old is None:
            return Rejected("replay", RejectReason.NOT_FOUND)
        if JobState(old.state) not in TERMINAL_STATES:
            return Rejected("replay", RejectReason.ILLEGAL, JobState(old.state))
        new = NewJob(
            owner=old.owner,
            kind=old.kind,
            kind_version=old.kind_version,
            input=old.input,
            max_attempts=old.max_attempts,
            max_elapsed_seconds=old.max_elapsed_seconds,
            replay_of=old.id,
        )
        return await self._insert(conn, "replay", new, actor=actor, note=note)

    async def _insert(
        self,
        conn: AsyncConnection,
        name: str,
        new: NewJob,
        *,
        actor: Actor,
        note: str | None = None,
    ) -> Applied:
        now = self.clock.now()
        row = (
            await conn.execute(
                insert(jobs)
                .values(
                    owner=new.owner,
                    kind=new.kind,
                    kind_version=new.kind_version,
                    input=dict(new.input),
                    state=JobState.QUEUED.value,
                    reason=Reason.NEW.value,
                    max_attempts=new.max_attempts,
                    max_elapsed_seconds=new.max_elapsed_seconds,
                    created_at=now,
                    updated_at=now,
                    available_at=now,
                    budget_started_at=now,
                    request_id=new.request_id,
                    idempotency_key=new.idempotency_key,
                    replay_of=new.replay_of,
                )
                .returning(*jobs.c)
            )
        ).one()
        await conn.execute(
            insert(job_history).values(
                job_id=row.id,
                at=now,
                transition=name,
                from_state=None,
                to_state=JobState.QUEUED.value,
                reason=Reason.NEW.value,
                actor=str(actor),
                event_id=new.request_id,
                note=note,
                data=_creation_data(new),
            )
        )
        return Applied(name, None, JobState.QUEUED, row)

    # -- claiming ---------------------------------------------------------------------

    async def claim(
        self,
        conn: AsyncConnection,
        *,
        worker_id: str,
        handlers: Sequence[str],
        limit: int,
    ) -> list[Row[Any]]:
        """Claim up to ``limit`` queued jobs in one statement; each gets a new attempt.

        ``handlers`` are ``"kind@version"`` keys this worker can run; other jobs stay
        queued, visible, for a worker that can.
        """
        return list(
            (
                await conn.execute(
                    CLAIM,
                    {
                        "worker_id": worker_id,
                        "actor": str(Actor("worker", worker_id)),
                        "handlers": list(handlers),
                        "limit": limit,
                        "lease_seconds": self.lease_seconds,
                        "offset_seconds": self.clock.offset.total_seconds(),
                    },
                )
            ).all()
        )

    # -- worker bookkeeping (fenced; no state change) ---------------------------------

    async def heartbeat(
        self, conn: AsyncConnection, job_id: uuid.UUID, attempt_id: uuid.UUID
    ) -> JobState | None:
        """Extend the lease. Returns the job's state (the worker learns of a cancel
        request here), or ``None`` when the lease is lost: the worker must stop."""
        now = self.clock.now()
        lease = self.clock.after(self.lease_seconds)
        row = (
            await conn.execute(
                update(jobs)
                .where(
                    jobs.c.id == job_id,
                    jobs.c.current_attempt_id == attempt_id,
                    jobs.c.state.in_([s.value for s in ACTIVE_STATES]),
                    jobs.c.lease_expires_at > now,
                )
                .values(lease_expires_at=lease, heartbeat_at=now)
                .returning(jobs.c.state, jobs.c.lease_expires_at)
            )
        ).first()
        if row is None:
            return None
        await conn.execute(
            update(attempts)
            .where(attempts.c.id == attempt_id)
            .values(lease_expires_at=row.lease_expires_at, heartbeat_at=now)
        )
        return JobState(row.state)

    async def heartbeat_many(
        self, conn: AsyncConnection, held: Sequence[tuple[uuid.UUID, uuid.UUID]]
    ) -> dict[uuid.UUID, JobState | None]:
        """Extend the leases of many ``(job_id, attempt_id)`` pairs in one statement.

        Per job: its state when the lease was extended (a cancel request shows here),
        ``None`` when the lease is lost (the worker must stop). A job absent from the
        answer was locked by another transaction (a publication, a cancel): still held,
        try again on the next beat."""
        if not held:
            return {}
        offset = self.clock.offset.total_seconds()
        beat = await conn.execute(
            HEARTBEAT_MANY,
            {
                "job_ids": [job_id for job_id, _ in held],
                "attempt_ids": [attempt_id for _, attempt_id in held],
                "lease_seconds": self.lease_seconds,
                "offset_seconds": offset,
            },
        )
        states: dict[uuid.UUID, JobState | None] = {r.id: JobState(r.state) for r in beat}
        missing = {job_id: attempt_id for job_id, attempt_id in held if job_id not in states}
        if missing:
            status = await conn.execute(
                LEASE_STATUS, {"job_ids": list(missing), "offset_seconds": offset}
            )
            seen = set()
            for row in status:
                seen.add(row.id)
                still_held = (
                    row.current_attempt_id == missing[row.id]
                    and row.lease_live
                    and JobState(row.state) in ACTIVE_STATES
                )
                if not still_held:
                    states[row.id] = None
            states.update({job_id: None for job_id in missing if job_id not in seen})
        return states

    async def _check_fence(
        self, conn: AsyncConnection, name: str, job_id: uuid.UUID, attempt_id: uuid.UUID
    ) -> Outcome:
        """A fenced no-op: Applied (nothing written) while ``attempt_id`` holds a live
        lease on the job, Rejected otherwise."""
        row = (
            await conn.execute(
                select(jobs).where(
                    jobs.c.id == job_id,
                    jobs.c.current_attempt_id == attempt_id,
                    jobs.c.state.in_([s.value for s in ACTIVE_STATES]),
                    jobs.c.lease_expires_at > self.clock.now(),
                )
            )
        ).first()
        if row is None:
            return Rejected(name, RejectReason.STALE_ATTEMPT)
        state = JobState(row.state)
        return Applied(name, state, state, row)

    async def _fenced_touch(
        self,
        conn: AsyncConnection,
        name: str,
        job_id: uuid.UUID,
        attempt_id: uuid.UUID,
        *,
        actor: Actor,
        values: Mapping[str, Any] | None = None,
        data: Mapping[str, Any] | None = None,
        record: bool = False,
    ) -> Outcome:
        return await self._move(
            conn,
            name,
            job_id,
            actor=actor,
            reason=None,
            attempt_id=attempt_id,
            values=values,
            data=data,
            record=record,
        )

    async def set_plan(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        attempt_id: uuid.UUID,
        stages: Sequence[tuple[str, str, int]],
        *,
        actor: Actor,
    ) -> Outcome:
        """Declare the stages ``(name, unit, total)`` at plan revision 1, once per job.

        A retried attempt keeps the existing plan (and its done counts)."""
        outcome = await self._fenced_touch(
            conn,
            "record_progress",
            job_id,
            attempt_id,
            actor=actor,
            values={"plan_revision": func.greatest(jobs.c.plan_revision, 1)},
        )
        if isinstance(outcome, Applied):
            for position, (stage, unit, total) in enumerate(stages):
                await conn.execute(
                    pg_insert(job_stages)
                    .values(
                        job_id=job_id,
                        position=position,
                        name=stage,
                        unit=unit,
                        total=total,
                        plan_revision=1,
                    )
                    .on_conflict_do_nothing()
                )
        return outcome

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
    ) -> Outcome:
        """A unit of ``stage`` is done: a durable checkpoint, counted once however many
        attempts finish it."""
        outcome = await self._fenced_touch(
            conn,
            "record_progress",
            job_id,
            attempt_id,
            actor=actor,
            values={"current_stage": stage},
        )
        if isinstance(outcome, Applied):
            inserted = (
                await conn.execute(
                    pg_insert(job_checkpoints)
                    .values(
                        job_id=job_id,
                        stage=stage,
                        unit_name=unit_name,
                        attempt_id=attempt_id,
                        data=dict(checkpoint) if checkpoint else None,
                    )
                    .on_conflict_do_nothing()
                    .returning(job_checkpoints.c.unit_name)
                )
            ).first()
            if inserted is not None:
                await conn.execute(
                    update(job_stages)
                    .where(job_stages.c.job_id == job_id, job_stages.c.name == stage)
                    .values(done=job_stages.c.done + 1, updated_at=self.clock.now())
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
    ) -> Outcome:
        return await self._fenced_touch(
            conn,
            "record_progress",
            job_id,
            attempt_id,
            actor=actor,
            values={"current_stage": stage},
        )

    async def expand_plan(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        attempt_id: uuid.UUID,
        stage: str,
        new_total: int,
        *,
        actor: Actor,
    ) -> Outcome:
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
            # changes, so nothing is written and the version stays; only the fence is checked.
            return await self._check_fence(conn, "expand_plan", job_id, attempt_id)
        outcome = await self._fenced_touch(
            conn,
            "expand_plan",
            job_id,
            attempt_id,
            actor=actor,
            values={"plan_revision": jobs.c.plan_revision + 1, "current_stage": stage},
            data={"stage": stage, "total": new_total},
            record=True,
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
    ) -> Outcome:
        """Private outputs moved on (``partial_private`` -> ``staged_private``)."""
        if delivery not in {DeliveryState.PARTIAL_PRIVATE, DeliveryState.STAGED_PRIVATE}:
            raise ValueError(f"stage_output moves private outputs only, not to {delivery}")
        allowed_from = [src.value for src, dst in DELIVERY_MOVES if dst == delivery]
        allowed_from.append(delivery.value)
        return await self._fenced_touch(
            conn,
            "stage_output",
            job_id,
            attempt_id,
            actor=actor,
            values={
                "delivery_state": case(
                    (jobs.c.delivery_state.in_(allowed_from), literal(delivery.value)),
                    else_=jobs.c.delivery_state,
                )
            },
        )

    # -- ending an attempt --------------------------------------------------------------

    async def retry_later(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        attempt_id: uuid.UUID,
        *,
        error: Mapping[str, Any],
        delay_seconds: float,
        actor: Actor,
    ) -> Outcome:
        return await self._move(
            conn,
            "retry_later",
            job_id,
            actor=actor,
            reason=Reason.RETRY,
            attempt_id=attempt_id,
            values={"available_at": self.clock.after(delay_seconds), "last_error": dict(error)},
            end_attempt=AttemptOutcome.RETRY,
            attempt_error=error,
            data={"error": dict(error), "delay_seconds": delay_seconds},
        )

    async def release(
        self, conn: AsyncConnection, job_id: uuid.UUID, attempt_id: uuid.UUID, *, actor: Actor
    ) -> Outcome:
        """Graceful shutdown: back to ``queued`` without charging the attempt."""
        outcome = await self._move(
            conn,
            "release",
            job_id,
            actor=actor,
            reason=Reason.RETRY,
            attempt_id=attempt_id,
            values={
                "available_at": self.clock.now(),
                "charged_attempts": func.greatest(jobs.c.charged_attempts - 1, 0),
            },
            end_attempt=AttemptOutcome.RELEASED,
            note="worker shutting down; attempt not charged",
        )
        if isinstance(outcome, Applied):
            await conn.execute(
                update(attempts).where(attempts.c.id == attempt_id).values(charged=0)
            )
        return outcome

    async def give_up(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        attempt_id: uuid.UUID,
        *,
        error: Mapping[str, Any],
        reason: Reason,
        actor: Actor,
    ) -> Outcome:
        return await self._move(
            conn,
            "give_up",
            job_id,
            actor=actor,
            reason=reason,
            attempt_id=attempt_id,
            values={"last_error": dict(error)},
            end_attempt=AttemptOutcome.UNRESOLVED,
            attempt_error=error,
            data={"error": dict(error)},
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
    ) -> Outcome:
        if on_deadline not in {"fail", "escalate"}:
            raise ValueError("on_deadline must be 'fail' or 'escalate'")
        return await self._move(
            conn,
            "wait",
            job_id,
            actor=actor,
            reason=reason,
            attempt_id=attempt_id,
            values={
                "wait_deadline_at": self.clock.after(deadline_seconds),
                "wait_on_deadline": on_deadline,
            },
            end_attempt=AttemptOutcome.WAITING,
            data={"deadline_seconds": deadline_seconds, "on_deadline": on_deadline},
        )

    async def stop_canceled(
        self, conn: AsyncConnection, job_id: uuid.UUID, attempt_id: uuid.UUID, *, actor: Actor
    ) -> Outcome:
        return await self._move(
            conn,
            "stop_canceled",
            job_id,
            actor=actor,
            reason=Reason.CANCELED,
            attempt_id=attempt_id,
            end_attempt=AttemptOutcome.CANCELED,
        )

    async def publish(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        attempt_id: uuid.UUID,
        *,
        result_ref: Mapping[str, Any],
        ttl_seconds: float,
        actor: Actor,
    ) -> Outcome:
        """Commit ``succeeded`` + ``available``. Call :meth:`lock_for_publication` first
        in the same transaction, make the result owner-retrievable, then call this."""
        return await self._move(
            conn,
            "publish",
            job_id,
            actor=actor,
            reason=Reason.PUBLISHED,
            attempt_id=attempt_id,
            values={
                "delivery_state": DeliveryState.AVAILABLE.value,
                "result_ref": dict(result_ref),
                "delivery_expires_at": self.clock.after(ttl_seconds),
            },
            end_attempt=AttemptOutcome.SUCCEEDED,
            delivery_to=DeliveryState.AVAILABLE,
        )

    async def publish_many(
        self,
        conn: AsyncConnection,
        held: Sequence[tuple[uuid.UUID, uuid.UUID]],
        *,
        result_ref: Mapping[str, Any],
        ttl_seconds: float,
        actor: Actor,
    ) -> set[uuid.UUID]:
        """:meth:`publish` for many ``(job_id, attempt_id)`` whose result has no files,
        in one statement (history and attempts included). Returns the jobs published;
        the others were no longer held by the given attempt (fenced out)."""
        if not held:
            return set()
        rows = await conn.execute(
            PUBLISH_MANY,
            {
                "job_ids": [job_id for job_id, _ in held],
                "attempt_ids": [attempt_id for _, attempt_id in held],
                "result_ref": json.dumps(dict(result_ref)),
                "ttl_seconds": ttl_seconds,
                "actor": str(actor),
                "offset_seconds": self.clock.offset.total_seconds(),
            },
        )
        return {row.id for row in rows}

    async def lock_for_publication(
        self, conn: AsyncConnection, job_id: uuid.UUID, attempt_id: uuid.UUID
    ) -> bool:
        """Take the job row lock that serializes publication against cancellation.

        True when this attempt still holds a live lease on a publishable job; from here
        until commit no cancel can slip in, so the publication cannot be interrupted."""
        sources = [s.value for s in transition("publish").sources]
        row = (
            await conn.execute(
                select(jobs.c.id)
                .where(
                    jobs.c.id == job_id,
                    jobs.c.current_attempt_id == attempt_id,
                    jobs.c.state.in_(sources),
                    jobs.c.lease_expires_at > self.clock.now(),
                )
                .with_for_update()
            )
        ).first()
        return row is not None

    async def fail(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        attempt_id: uuid.UUID,
        *,
        error: Mapping[str, Any],
        actor: Actor,
    ) -> Outcome:
        return await self._move(
            conn,
            "fail",
            job_id,
            actor=actor,
            reason=Reason.ERROR,
            attempt_id=attempt_id,
            values={"error": dict(error)},
            end_attempt=AttemptOutcome.FAILED,
            attempt_error=error,
            data={"error": dict(error)},
        )

    # -- requests from clients and operators -----------------------------------------

    async def request_cancel(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        *,
        actor: Actor,
        owner: str | None = None,
        request_id: str | None = None,
    ) -> Outcome:
        """Cancel: ``queued``/``waiting`` -> ``canceled``; ``running`` -> ``cancel_requested``.

        A cancel that loses against a terminal state is still recorded in the history
        (``to`` = ``from``) so the late request is visible, and returns :class:`Rejected`.
        """
        outcome = await self._move(
            conn,
            "request_cancel",
            job_id,
            actor=actor,
            reason=None,
            owner=owner,
            event_id=request_id,
            values={
                "cancel": func.jsonb_build_object(
                    "requested_at", self.clock.now(), "requested_by", str(actor)
                ),
            },
        )
        if (
            isinstance(outcome, Rejected)
            and outcome.current is not None
            and outcome.current in TERMINAL_STATES
        ):
            await conn.execute(
                insert(job_history).values(
                    job_id=job_id,
                    at=self.clock.now(),
                    transition="request_cancel",
                    from_state=outcome.current.value,
                    to_state=outcome.current.value,
                    reason=CANCEL_TOO_LATE,
                    actor=str(actor),
                    event_id=request_id,
                    note=f"cancel arrived after the job was {outcome.current.value}",
                )
            )
        return outcome

    async def expire_result(
        self, conn: AsyncConnection, job_id: uuid.UUID, *, actor: Actor = SYSTEM_SWEEPER
    ) -> Outcome:
        """Retention passed: delivery ``available`` -> ``expired``; state unchanged."""
        return await self._move(
            conn,
            "expire_result",
            job_id,
            actor=actor,
            reason=None,
            values={"delivery_state": DeliveryState.EXPIRED.value},
            note="result retention passed; files removed",
            delivery_to=DeliveryState.EXPIRED,
        )

    async def rescue(
        self, conn: AsyncConnection, job_id: uuid.UUID, *, backoff_seconds: float
    ) -> Outcome:
        """The reaper takes back a job whose lease expired (the row is already locked by
        the reaper's ``SKIP LOCKED`` batch): ``running`` -> ``queued`` while the attempt
        budget lasts, else ``unresolved``; ``cancel_requested`` -> ``canceled``."""
        row = (
            await conn.execute(
                select(
                    jobs.c.state,
                    jobs.c.charged_attempts,
                    jobs.c.max_attempts,
                    jobs.c.current_attempt_id,
                    (jobs.c.lease_expires_at <= self.clock.now()).label("expired"),
                    (
                        jobs.c.budget_started_at
                        + func.make_interval(0, 0, 0, 0, 0, 0, jobs.c.max_elapsed_seconds)
                        <= self.clock.now()
                    ).label("out_of_time"),
                )
                .where(jobs.c.id == job_id)
                .with_for_update()
            )
        ).first()
        if row is None:
            return Rejected("rescue", RejectReason.NOT_FOUND)
        if JobState(row.state) not in ACTIVE_STATES or not row.expired:
            return Rejected("rescue", RejectReason.ILLEGAL, JobState(row.state))
        error = error_doc(
            "lease_expired",
            "the worker holding the job stopped heartbeating",
            retryable=True,
        )
        common: dict[str, Any] = {
            "actor": SYSTEM_REAPER,
            "attempt_id": row.current_attempt_id,
            "end_attempt": AttemptOutcome.LOST,
            "attempt_error": error,
            "data": {"error": error},
        }
        if row.state == JobState.CANCEL_REQUESTED.value:
            return await self._move(
                conn,
                "rescue",
                job_id,
                reason=Reason.CANCELED,
                **common,
            )
        if row.charged_attempts >= row.max_attempts or row.out_of_time:
            return await self._move(
                conn,
                "rescue_exhausted",
                job_id,
                reason=Reason.TIME_EXHAUSTED if row.out_of_time else Reason.LEASE_LOST,
                values={"last_error": error},
                **common,
            )
        return await self._move(
            conn,
            "rescue",
            job_id,
            reason=Reason.RETRY,
            values={"last_error": error, "available_at": self.clock.after(backoff_seconds)},
            **common,
        )

    async def resume(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        *,
        actor: Actor,
        note: str | None = None,
    ) -> Outcome:
        """Operator: ``unresolved`` -> ``queued`` with a fresh attempt budget."""
        now = self.clock.now()
        return await self._move(
            conn,
            "resume",
            job_id,
            actor=actor,
            reason=Reason.RESUMED,
            values={"charged_attempts": 0, "budget_started_at": now, "available_at": now},
            note=note,
        )

    async def operator_decide(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        *,
        decision: str,
        actor: Actor,
        note: str | None = None,
    ) -> Outcome:
        """Operator: ``unresolved`` -> ``canceled`` or ``failed``."""
        if decision == "cancel":
            return await self._move(
                conn,
                "operator_cancel",
                job_id,
                actor=actor,
                reason=Reason.CANCELED,
                note=note,
            )
        if decision == "fail":
            error = error_doc("operator_failed", note or "failed by an operator", retryable=False)
            return await self._move(
                conn,
                "operator_fail",
                job_id,
                actor=actor,
                reason=Reason.OPERATOR,
                values={"error": error},
                note=note,
            )
        raise ValueError(f"unknown operator decision {decision!r}")

    async def pass_deadline(self, conn: AsyncConnection, job_id: uuid.UUID) -> Outcome:
        """A waiting job's deadline passed: apply its rule -- ``fail`` (``failed``,
        reason ``deadline_passed``) or ``escalate`` (``unresolved``, an operator decides)."""
        row = (
            await conn.execute(
                select(
                    jobs.c.state,
                    jobs.c.wait_on_deadline,
                    (jobs.c.wait_deadline_at <= self.clock.now()).label("passed"),
                )
                .where(jobs.c.id == job_id)
                .with_for_update()
            )
        ).first()
        if row is None:
            return Rejected("deadline_fail", RejectReason.NOT_FOUND)
        if row.state != JobState.WAITING.value or not row.passed:
            return Rejected("deadline_fail", RejectReason.ILLEGAL, JobState(row.state))
        error = error_doc("deadline_passed", "the wait's deadline passed", retryable=False)
        if row.wait_on_deadline == "escalate":
            return await self._move(
                conn,
                "deadline_escalate",
                job_id,
                actor=SYSTEM_SWEEPER,
                reason=Reason.DEADLINE_ESCALATED,
                values={"last_error": {**error, "retryable": True}},
                data={"error": error},
            )
        return await self._move(
            conn,
            "deadline_fail",
            job_id,
            actor=SYSTEM_SWEEPER,
            reason=Reason.DEADLINE_PASSED,
            values={"error": error},
            data={"error": error},
        )

    async def approve(
        self, conn: AsyncConnection, job_id: uuid.UUID, *, actor: Actor, note: str | None = None
    ) -> Outcome:
        return await self._move(
            conn,
            "approve",
            job_id,
            actor=actor,
            reason=Reason.REVIEW_APPROVED,
            values={"available_at": self.clock.now()},
            note=note,
        )

    async def reject(
        self, conn: AsyncConnection, job_id: uuid.UUID, *, actor: Actor, note: str | None = None
    ) -> Outcome:
        error = error_doc("review_rejected", note or "rejected by a reviewer", retryable=False)
        return await self._move(
            conn,
            "reject",
            job_id,
            actor=actor,
            reason=Reason.REVIEW_REJECTED,
            values={"error": error},
            note=note,
        )


def _creation_data(new: NewJob) -> dict[str, Any] | None:
    """The identities a creation carries besides the request id; absent ones are left
    out (never written as the string ``"None"``)."""
    data: dict[str, Any] = {}
    if new.idempotency_key is not None:
        data["idempotency_key"] = new.idempotency_key
    if new.replay_of is not None:
        data["replay_of"] = str(new.replay_of)
    return data or None


def _delivery_may_move(current: str, target: DeliveryState) -> bool:
    return (DeliveryState(current), target) in DELIVERY_MOVES


def _default_reason(target: JobState) -> Reason:
    defaults: dict[JobState, Reason] = {
        JobState.QUEUED: Reason.NEW,
        JobState.RUNNING: Reason.CLAIMED,
        JobState.CANCEL_REQUESTED: Reason.CANCEL_REQUESTED,
        JobState.SUCCEEDED: Reason.PUBLISHED,
        JobState.FAILED: Reason.ERROR,
        JobState.CANCELED: Reason.CANCELED,
        JobState.UNRESOLVED: Reason.RETRIES_EXHAUSTED,
        JobState.WAITING: Reason.REVIEW,
    }
    return defaults[target]
