"""A job's actions: cancel, resume, fail, replay, a review's decision and an external
event (signal). Each runs one named transition in its own transaction and answers the
job's status from the row the write returned (same transaction, nothing re-read).

A refused move is raised as :class:`~atlas_jobs._app.services.refusals.MoveRefused`
AFTER the commit, so what a refusal records (a late cancel, a decision too late) stays
recorded.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from atlas_jobs._app.apikeys import Principal
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.records import JobRow
from atlas_jobs._app.lifecycle import ActorKind
from atlas_jobs._app.services.reading import public_status
from atlas_jobs._app.services.refusals import FourEyesRefused, MoveRefused
from atlas_jobs._app.services.schemas import JobPublic, RescheduleCreate
from atlas_jobs._app.services.timing import after_start_by_refusal, check_reschedule
from atlas_jobs._app.transitions import (
    Actor,
    Approver,
    MoveResult,
    Rejected,
    RejectReason,
    SameHandsRefused,
    Transitions,
    after_start_by,
)


@dataclass(frozen=True, slots=True)
class Moved:
    """A move that took effect: the row after it and its status body. ``replayed``: the
    same decision took effect before and nothing was recorded again."""

    job: JobRow
    public: JobPublic
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class Signaled:
    """A received external event: its record (the first outcome), and whether this
    delivery was a repeat of it."""

    record: Any
    replayed: bool


async def settled(conn: AsyncConnection, outcome: MoveResult) -> Moved | MoveRefused:
    """The move's answer, read in its transaction: a repeat of a move that took effect
    is answered like the move itself, the same decision repeated as a replay."""
    if isinstance(outcome, Rejected):
        if outcome.job is not None and outcome.took_effect:
            return Moved(outcome.job, await public_status(conn, outcome.job))
        if outcome.job is not None and outcome.reason == RejectReason.REPEATED:
            return Moved(outcome.job, await public_status(conn, outcome.job), replayed=True)
        return await refusal_of(conn, outcome)
    return Moved(outcome.job, await public_status(conn, outcome.job))


async def refusal_of(conn: AsyncConnection, outcome: Rejected) -> MoveRefused:
    """The refused move with the job's status now (none when there is no such job)."""
    if outcome.reason == RejectReason.NOT_FOUND or outcome.job is None:
        return MoveRefused(outcome.transition, outcome.reason, outcome.current)
    public = await public_status(conn, outcome.job)
    return MoveRefused(
        outcome.transition, outcome.reason, outcome.current, job=outcome.job, public=public
    )


async def _run(
    engine: AsyncEngine, move: Callable[[AsyncConnection], Awaitable[MoveResult]]
) -> Moved:
    async with engine.begin() as conn:
        answer = await settled(conn, await move(conn))
    if isinstance(answer, MoveRefused):
        raise answer
    return answer


async def cancel(
    engine: AsyncEngine,
    transitions: Transitions,
    job_id: uuid.UUID,
    *,
    actor: Actor,
    owner: str | None,
    request_id: str | None,
    note: str | None = None,
) -> Moved:
    """Cancel (a running job stops at its next safe point); an operator's cancel of
    unresolved work is an operator decision."""
    return await _run(
        engine,
        lambda conn: transitions.request_cancel(
            conn, job_id, actor=actor, owner=owner, request_id=request_id, note=note
        ),
    )


async def resume(
    engine: AsyncEngine,
    transitions: Transitions,
    job_id: uuid.UUID,
    *,
    operator: str,
    note: str | None,
) -> Moved:
    """An operator resumes an unresolved job with a new attempt budget."""
    actor = Actor(ActorKind.OPERATOR, operator)
    return await _run(engine, lambda conn: transitions.resume(conn, job_id, actor=actor, note=note))


async def fail(
    engine: AsyncEngine,
    transitions: Transitions,
    job_id: uuid.UUID,
    *,
    operator: str,
    note: str | None,
) -> Moved:
    """An operator fails an unresolved job."""
    actor = Actor(ActorKind.OPERATOR, operator)
    return await _run(
        engine,
        lambda conn: transitions.operator_decide(
            conn, job_id, decision="fail", actor=actor, note=note
        ),
    )


async def replay(
    engine: AsyncEngine,
    transitions: Transitions,
    job_id: uuid.UUID,
    *,
    operator: str,
    key_id: uuid.UUID,
    note: str | None,
) -> Moved:
    """An operator runs a terminal job again as a new job; the answer is the NEW job's."""
    actor = Actor(ActorKind.OPERATOR, operator, key_id=key_id)
    return await _run(engine, lambda conn: transitions.replay(conn, job_id, actor=actor, note=note))


@dataclass(frozen=True, slots=True)
class ReviewPolicy:
    """The review rules the service is configured with: ``scope`` ``"owner"`` (a
    reviewer decides its own owner's jobs only; another's is "not found") or
    ``"global"``; ``four_eyes``: an approval by the hands that submitted the job is
    refused."""

    scope: str
    four_eyes: bool


async def review(
    engine: AsyncEngine,
    transitions: Transitions,
    job_id: uuid.UUID,
    *,
    approve: bool,
    reviewer: Principal,
    note: str | None,
    policy: ReviewPolicy,
) -> Moved:
    """A reviewer's decision at a job's gate, within the policy's scope; with four-eyes
    reviews, an approval by the hands that submitted the job is refused
    (:class:`FourEyesRefused`, nothing written)."""
    actor = Actor(ActorKind.REVIEWER, reviewer.owner, key_id=reviewer.key_id)
    owner = reviewer.owner if policy.scope == "owner" else None
    four_eyes = Approver(reviewer.key_id, reviewer.holder) if policy.four_eyes else None
    try:
        return await _run(
            engine,
            lambda conn: transitions.decide_review(
                conn,
                job_id,
                approve=approve,
                actor=actor,
                note=note,
                owner=owner,
                four_eyes=four_eyes,
            ),
        )
    except SameHandsRefused as refused:
        raise FourEyesRefused(refused.holder, holder_required=refused.holder_required) from None


async def reschedule(
    engine: AsyncEngine,
    transitions: Transitions,
    job_id: uuid.UUID,
    body: RescheduleCreate,
    *,
    clock: Clock,
    actor: Actor,
    owner: str | None,
    request_id: str | None,
) -> Moved:
    """Move or drop a queued job's delay. The body is checked first (422 naming the
    field); a new not-before that is not before the job's ``start_by`` is the caller's
    mistake, refused as a 422 naming the field that asked for it (and rolled back),
    while a job no longer queued is a refused move (409, with its state)."""
    check_reschedule(body, clock)

    async def move(conn: AsyncConnection) -> MoveResult:
        outcome = await transitions.reschedule(
            conn,
            job_id,
            run_at=body.run_at,
            delay_seconds=None if body.delay_seconds is None else float(body.delay_seconds),
            actor=actor,
            owner=owner,
            request_id=request_id,
        )
        if isinstance(outcome, Rejected) and after_start_by(outcome):
            raise after_start_by_refusal(body, outcome)
        return outcome

    return await _run(engine, move)


async def signal(
    engine: AsyncEngine,
    transitions: Transitions,
    job_id: uuid.UUID,
    *,
    event_id: str,
    actor: Actor,
    data: dict[str, Any] | None,
    owner: str | None,
) -> Signaled:
    """Deliver an external event to a job waiting for one: the first delivery resumes
    it, a repeat of the event id changes nothing."""
    async with engine.begin() as conn:
        outcome = await transitions.signal(
            conn, job_id, event_id=event_id, actor=actor, data=data, owner=owner
        )
        refused = await refusal_of(conn, outcome) if isinstance(outcome, Rejected) else None
    if refused is not None:
        raise refused
    assert not isinstance(outcome, Rejected)
    return Signaled(outcome.record, outcome.replayed)
