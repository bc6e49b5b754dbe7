"""Moves asked for over HTTP: creation, cancellation, reviews, operator decisions."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app import metrics
from atlas_jobs._app.db import driver
from atlas_jobs._app.db.moves import (
    Actor,
    Applied,
    MoveResult,
    Rejected,
    RejectReason,
    Step,
    check_actor,
)
from atlas_jobs._app.db.queries import (
    CREATE,
    CREATE_ADMITTED,
    CREATE_KEYED,
    CREATE_KEYED_TAGGED,
    LATE_CANCEL,
)
from atlas_jobs._app.db.records import job_row, maybe_job_row
from atlas_jobs._app.db.schema import jobs
from atlas_jobs._app.ids import new_id
from atlas_jobs._app.lifecycle import (
    CANCEL_TOO_LATE,
    TERMINAL_STATES,
    TRANSITIONS,
    JobState,
    TransitionName,
)
from atlas_jobs._app.transitions.base import (
    KeyedRefusal,
    NewJob,
    OwnerAtCapacity,
    Service,
    error_doc,
)

_T = TypeVar("_T")


class RequestMoves(Service):
    # -- creation ---------------------------------------------------------------------

    async def create(self, conn: AsyncConnection, new: NewJob, *, actor: Actor) -> Applied:
        [created] = await self.create_many(conn, [new], actor=actor)
        return created

    async def create_many(
        self,
        conn: AsyncConnection,
        batch: Sequence[NewJob],
        *,
        actor: Actor,
        transition: TransitionName = TransitionName.CREATE,
        note: str | None = None,
        admission_cap: int | None = None,
    ) -> list[Applied]:
        """Create jobs -- rows and history -- in ONE statement; results in batch order,
        each with the job's status columns (``JOB_STATUS_COLUMNS``), not its whole row.

        With ``admission_cap`` (every job of one owner): the same statement first applies
        the per-owner admission rule (``CREATE_ADMITTED``) and creates nothing, raising
        :class:`OwnerAtCapacity`, when the owner's unfinished jobs plus the batch would
        exceed the cap."""
        if not batch:
            return []
        check_actor(TRANSITIONS[transition], actor)
        ids = [new_id() for _ in batch]
        params = _one_job(ids[0], batch[0]) if len(batch) == 1 else _jobs_as_arrays(ids, batch)
        params |= self._move_params(transition, actor, note)
        if admission_cap is not None:
            [owner] = {n.owner for n in batch}  # admission is per owner
            params |= {"admit_owner": owner, "admit_cap": admission_cap}
        creation = CREATE if admission_cap is None else CREATE_ADMITTED
        tagged = any(n.tags for n in batch)
        if not tagged:
            params.pop("p_tags")
        statement = creation.shape(
            one=len(batch) == 1, by_key=actor.key_id is not None, tagged=tagged
        )
        rows = await driver.rows(conn, statement, params)
        by_id = {row.id: row for row in rows}
        if None in by_id:  # the admission rule refused the batch: nothing was written
            raise OwnerAtCapacity(int(by_id[None].admission_unfinished))
        return [
            Applied(transition, None, JobState.QUEUED, job_row(by_id[job_id])) for job_id in ids
        ]

    async def create_keyed(
        self,
        conn: AsyncConnection,
        new: NewJob,
        *,
        fingerprint: str,
        actor: Actor,
        admission_cap: int | None = None,
    ) -> Applied | KeyedRefusal:
        """Create ONE job with its Idempotency-Key (``new.idempotency_key``) in ONE
        statement (``CREATE_KEYED``): the key's in-flight lock, the admission rule when
        ``admission_cap`` is set, the key row, the job and its history row. Nothing is
        created when the key is held by a request in flight
        (:attr:`KeyedRefusal.IN_FLIGHT`), already stored (:attr:`KeyedRefusal.STORED`:
        read it to replay its job) or when the cap refuses (:class:`OwnerAtCapacity`;
        the key may be stored too: a replay is never refused, so read it first)."""
        key = new.idempotency_key
        if key is None:
            raise ValueError("create_keyed needs new.idempotency_key")
        check_actor(TRANSITIONS[TransitionName.CREATE], actor)
        job_id = new_id()
        job = _one_job(job_id, new)
        if not new.tags:
            job.pop("p_tags")
        [row] = await driver.rows(
            conn,
            CREATE_KEYED_TAGGED if new.tags else CREATE_KEYED,
            {
                "key_scope": f"{new.owner}:{key}",
                "key": key,
                "fingerprint": fingerprint,
                "admit_owner": new.owner,
                "admit_cap": admission_cap,
                **job,
                **self._move_params(TransitionName.CREATE, actor, None),
                "actor_key": actor.key_id,  # CREATE_KEYED always records it
            },
        )
        if not row.key_free:
            return KeyedRefusal.IN_FLIGHT
        if row.id is not None:
            return Applied(TransitionName.CREATE, None, JobState.QUEUED, job_row(row))
        if admission_cap is not None and row.admission_unfinished + 1 > admission_cap:
            raise OwnerAtCapacity(int(row.admission_unfinished))
        return KeyedRefusal.STORED

    def _move_params(
        self, transition: TransitionName, actor: Actor, note: str | None
    ) -> dict[str, Any]:
        """What the creation statements bind besides the jobs' fields."""
        return {
            "transition": transition.value,
            "actor": str(actor),
            "note": note,
            **self.clock.bind(),
        } | ({} if actor.key_id is None else {"actor_key": actor.key_id})

    async def replay(
        self, conn: AsyncConnection, job_id: uuid.UUID, *, actor: Actor, note: str | None = None
    ) -> MoveResult:
        """A terminal job runs again as a **new** job with ``replay_of`` set."""
        old = maybe_job_row(
            (await conn.execute(select(jobs).where(jobs.c.id == job_id).with_for_update())).first()
        )
        if old is None:
            return Rejected(TransitionName.REPLAY, RejectReason.NOT_FOUND)
        if JobState(old.state) not in TERMINAL_STATES:
            return Rejected(TransitionName.REPLAY, RejectReason.ILLEGAL, JobState(old.state), old)
        new = NewJob(
            owner=old.owner,
            kind=old.kind,
            kind_version=old.kind_version,
            input=old.input,
            max_attempts=old.max_attempts,
            max_elapsed_seconds=old.max_elapsed_seconds,
            replay_of=old.id,
            priority=old.priority,
            concurrency_key=old.concurrency_key or None,
            concurrency_limit=old.concurrency_limit,
            concurrency_rate=old.concurrency_rate,
            concurrency_period_seconds=old.concurrency_period_seconds,
            tags=tuple(old.tags),
        )
        [created] = await self.create_many(
            conn, [new], actor=actor, transition=TransitionName.REPLAY, note=note
        )
        return created

    # -- cancellation -----------------------------------------------------------------

    async def request_cancel(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        *,
        actor: Actor,
        owner: str | None = None,
        request_id: str | None = None,
        note: str | None = None,
    ) -> MoveResult:
        """Cancel: ``queued``/``waiting`` -> ``canceled``; ``running`` -> ``cancel_requested``.

        An operator's cancel of ``unresolved`` work is the operator decision
        ``operator_cancel`` (the declaration's ``hands_over``). A cancel that loses
        against a terminal state is still recorded in the history (``to`` = ``from``)
        and returns :class:`Rejected`.
        """
        outcome = await self.executor.apply_one(
            conn,
            TRANSITIONS[TransitionName.REQUEST_CANCEL],
            Step(job_id, event_id=request_id, note=note),
            actor=actor,
            owner=owner,
        )
        if not isinstance(outcome, Rejected) or outcome.current is None:
            return outcome
        if outcome.current in TERMINAL_STATES:
            await conn.execute(
                LATE_CANCEL,
                {
                    "job_id": job_id,
                    "state": outcome.current.value,
                    "actor": str(actor),
                    "event_id": request_id,
                    "note": f"cancel arrived after the job was {outcome.current.value}",
                    **self.clock.bind(),
                },
            )
            metrics.TRANSITIONS.labels(CANCEL_TOO_LATE, outcome.current.value).inc()
        return outcome

    # -- delays -----------------------------------------------------------------------

    async def reschedule(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        *,
        run_at: datetime | None,
        delay_seconds: float | None = None,
        actor: Actor,
        owner: str | None = None,
        request_id: str | None = None,
    ) -> MoveResult:
        """The owner moves (``run_at``) or drops (``None``) a queued job's delay:
        ``queued`` -> ``queued``, claimable from then on (a time in the past: now).
        ``delay_seconds`` instead of ``run_at``: from now (database time). Refused when
        the job is not queued, or never started and its ``start_by`` passed, or the new
        not-before would not be before ``start_by`` (:func:`after_start_by` tells
        which)."""
        return await self.executor.apply_one(
            conn,
            TRANSITIONS[TransitionName.RESCHEDULE],
            Step(
                job_id,
                at=run_at,
                seconds=delay_seconds,
                event_id=request_id,
                data=(
                    {"run_at": run_at.isoformat()}
                    if run_at is not None
                    else {"run_at": None}
                    if delay_seconds is None
                    else {"delay_seconds": delay_seconds}
                ),
            ),
            actor=actor,
            owner=owner,
        )

    # -- reviews and events -----------------------------------------------------------

    async def approve(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        *,
        actor: Actor,
        note: str | None = None,
        owner: str | None = None,
    ) -> MoveResult:
        """A reviewer approves a job waiting for review (any other wait is refused);
        ``owner`` scopes it to one owner's jobs."""
        return await self.executor.apply_one(
            conn,
            TRANSITIONS[TransitionName.APPROVE],
            Step(job_id, note=note),
            actor=actor,
            owner=owner,
        )

    async def reject(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        *,
        actor: Actor,
        note: str | None = None,
        owner: str | None = None,
    ) -> MoveResult:
        error = error_doc("review_rejected", note or "rejected by a reviewer", retryable=False)
        return await self.executor.apply_one(
            conn,
            TRANSITIONS[TransitionName.REJECT],
            Step(job_id, error=error, note=note),
            actor=actor,
            owner=owner,
        )

    async def review(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        *,
        approve: bool,
        actor: Actor,
        note: str | None = None,
        owner: str | None = None,
    ) -> MoveResult:
        if approve:
            return await self.approve(conn, job_id, actor=actor, note=note, owner=owner)
        return await self.reject(conn, job_id, actor=actor, note=note, owner=owner)

    async def receive_event(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        *,
        event_id: str,
        actor: Actor,
        data: dict[str, Any] | None = None,
    ) -> MoveResult:
        """The awaited external event arrived: ``waiting`` (external) -> ``queued``."""
        return await self.executor.apply_one(
            conn,
            TRANSITIONS[TransitionName.RECEIVE_EVENT],
            Step(job_id, event_id=event_id, data=data),
            actor=actor,
        )

    # -- operator decisions -------------------------------------------------------------

    async def resume(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        *,
        actor: Actor,
        note: str | None = None,
    ) -> MoveResult:
        """Operator: ``unresolved`` -> ``queued`` with a fresh attempt budget."""
        return await self.executor.apply_one(
            conn, TRANSITIONS[TransitionName.RESUME], Step(job_id, note=note), actor=actor
        )

    async def operator_decide(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        *,
        decision: str,
        actor: Actor,
        note: str | None = None,
    ) -> MoveResult:
        """Operator: ``unresolved`` -> ``canceled`` or ``failed``."""
        if decision == "cancel":
            return await self.executor.apply_one(
                conn,
                TRANSITIONS[TransitionName.OPERATOR_CANCEL],
                Step(job_id, note=note),
                actor=actor,
            )
        if decision == "fail":
            error = error_doc("operator_failed", note or "failed by an operator", retryable=False)
            return await self.executor.apply_one(
                conn,
                TRANSITIONS[TransitionName.OPERATOR_FAIL],
                Step(job_id, error=error, note=note),
                actor=actor,
            )
        raise ValueError(f"unknown operator decision {decision!r}")


def _one_job(job_id: uuid.UUID, new: NewJob) -> dict[str, Any]:
    """One job's fields as the scalars of a creation statement's ``one`` shape
    (``atlas_jobs._app.db.queries._CREATION_FIELDS``)."""
    return {
        "p_id": job_id,
        "p_owner": new.owner,
        "p_kind": new.kind,
        "p_kind_version": new.kind_version,
        "p_input": json.dumps(dict(new.input)),
        "p_max_attempts": new.max_attempts,
        "p_max_elapsed_seconds": new.max_elapsed_seconds,
        "p_request_id": new.request_id,
        "p_idempotency_key": new.idempotency_key,
        "p_replay_of": new.replay_of,
        "p_data": _creation_data(new),
        "p_run_at": new.run_at,
        "p_run_after": new.run_after,
        "p_start_by": new.start_by,
        "p_start_within": new.start_within,
        "p_priority": new.priority,
        "p_concurrency_key": new.concurrency_key,
        "p_concurrency_limit": new.concurrency_limit,
        "p_concurrency_rate": new.concurrency_rate,
        "p_concurrency_period_seconds": new.concurrency_period_seconds,
        "p_tags": json.dumps(list(new.tags)) if new.tags else None,
    }


def _jobs_as_arrays(ids: Sequence[uuid.UUID], batch: Sequence[NewJob]) -> dict[str, Any]:
    """A batch's fields as the arrays of a creation statement's ``batch`` shape, one
    array per field in batch order, the inputs as one JSON array of them. An optional
    field no job of the batch has is sent as ONE NULL, not an array of them: ``unnest``
    pads a NULL array's column with NULLs, and the driver encodes no element (bulk
    creation carries none of them)."""
    # Every field's values in batch order, in one transposition of the tuples.
    values = zip(*batch, strict=True)
    column: dict[str, tuple[Any, ...]] = dict(zip(NewJob._fields, values, strict=True))
    return {
        "p_id": list(ids),
        "p_owner": column["owner"],
        "p_kind": column["kind"],
        "p_kind_version": column["kind_version"],
        "p_input": json.dumps([_document(job_input) for job_input in column["input"]]),
        "p_max_attempts": column["max_attempts"],
        "p_max_elapsed_seconds": column["max_elapsed_seconds"],
        "p_request_id": _optional(column["request_id"]),
        "p_idempotency_key": _optional(column["idempotency_key"]),
        "p_replay_of": _optional(column["replay_of"]),
        "p_data": _optional([_creation_data(n) for n in batch]),
        "p_run_at": _optional(column["run_at"]),
        "p_run_after": _optional(column["run_after"]),
        "p_start_by": _optional(column["start_by"]),
        "p_start_within": _optional(column["start_within"]),
        "p_priority": _optional(column["priority"]),
        "p_concurrency_key": _optional(column["concurrency_key"]),
        "p_concurrency_limit": _optional(column["concurrency_limit"]),
        "p_concurrency_rate": _optional(column["concurrency_rate"]),
        "p_concurrency_period_seconds": _optional(column["concurrency_period_seconds"]),
        "p_tags": _optional([json.dumps(list(tags)) if tags else None for tags in column["tags"]]),
    }


def _document(value: Mapping[str, Any]) -> dict[str, Any]:
    return value if type(value) is dict else dict(value)


def _optional(values: Sequence[_T | None]) -> Sequence[_T | None] | None:
    """A creation parameter array, or NULL when every element is NULL (counted in C: a
    batch checks fourteen optional fields of every job)."""
    return None if values.count(None) == len(values) else values


def _creation_data(new: NewJob) -> str | None:
    """The identities a creation carries besides the request id; absent ones are left
    out (never written as the string ``"None"``)."""
    data: dict[str, Any] = {}
    if new.idempotency_key is not None:
        data["idempotency_key"] = new.idempotency_key
    if new.replay_of is not None:
        data["replay_of"] = str(new.replay_of)
    if new.trigger is not None:
        data.update(new.trigger)
    if new.traceparent is not None:
        data["traceparent"] = new.traceparent
    return json.dumps(data) if data else None


def after_start_by(refused: Rejected) -> bool:
    """Whether a reschedule of a queued job was refused with the job's start deadline
    still open: the new not-before was not before ``start_by`` -- the caller's
    mistake (422), not the job's state (409)."""
    return (
        refused.transition == TransitionName.RESCHEDULE
        and refused.current == JobState.QUEUED
        and refused.job is not None
        and bool(getattr(refused.job, "start_open", False))
    )
