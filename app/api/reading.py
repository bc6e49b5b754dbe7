"""Job rows -> HTTP answers: the status body, its validators and polling headers, and
the one mapping of a refused move (:class:`~atlas_jobs._app.transitions.Rejected`) to its
problem."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from fastapi import Response
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from atlas_jobs._app.api.errors import (
    ApiError,
    CancelTooLateError,
    ConflictingDecisionError,
    DecisionTooLateError,
    JobNotFoundError,
    JobStateConflictError,
    NotAwaitingReviewError,
    NotAwaitingSignalError,
)
from atlas_jobs._app.api.schemas import JobPublic, ReviewDecision
from atlas_jobs._app.api.views import (
    etag,
    etag_matches,
    job_status,
    next_attempt_at,
    retry_after_seconds,
    waiting_for,
    waiting_tag,
)
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import reads
from atlas_jobs._app.db.engine import Connects
from atlas_jobs._app.lifecycle import TERMINAL_STATES, JobState, Reason, TransitionName, is_terminal
from atlas_jobs._app.transitions import Applied, MoveResult, Rejected, RejectReason


async def public_status(conn: AsyncConnection, job: Any) -> JobPublic:
    """The status body of a job row; its stages are read only when it has a plan."""
    return job_status(job, await reads.plan_stages(conn, job))


async def public_statuses(conn: AsyncConnection, rows: Sequence[Any]) -> list[JobPublic]:
    """The status bodies of many job rows; stages read once, for those with a plan."""
    planned = [row.id for row in rows if row.plan_revision]
    stages = await reads.stages_for(conn, planned) if planned else {}
    return [job_status(row, stages.get(row.id, [])) for row in rows]


async def read_status(
    conn: AsyncConnection, job_id: uuid.UUID, *, owner: str | None, clock: Clock | None = None
) -> tuple[Any, JobPublic]:
    """The job row and its status body; 404 for unknown *and* for not-yours."""
    now = (clock or Clock()).now()

    async def read_job() -> Any:
        return await reads.get_job(conn, job_id, owner=owner, now=now)

    job = await read_job()
    if job is None:
        raise JobNotFoundError()
    job, public = await _same_version_status(conn, job, read_job, if_none_match=None)
    assert public is not None
    return job, public


async def read_status_once(
    engine: AsyncEngine, job_id: uuid.UUID, *, owner: str | None, clock: Clock | None = None
) -> tuple[Any, JobPublic]:
    """Like :func:`read_status` on a short-lived connection (nothing held while waiting)."""
    async with engine.connect() as conn:
        return await read_status(conn, job_id, owner=owner, clock=clock)


async def read_status_unless_current(
    connections: Connects,
    job_id: uuid.UUID,
    *,
    owner: str | None,
    clock: Clock,
    if_none_match: str | None,
) -> tuple[Any, JobPublic | None]:
    """Like :func:`read_status_once`, but with ``None`` for the body when
    ``If-None-Match`` names the row's version: a 304 needs no body, so its stages are
    not read and nothing is built (one statement)."""
    async with connections.connect() as conn:

        async def read_job() -> Any:
            return await reads.get_job_now(conn, job_id, owner=owner, clock=clock)

        job = await read_job()
        if job is None:
            raise JobNotFoundError()
        if etag_matches(if_none_match, job.version, waiting_tag(waiting_for(job))):
            return job, None
        return await _same_version_status(conn, job, read_job, if_none_match=if_none_match)


READ_TRIES = 3
"""Reads of a planned job's stages before the newest pair is answered as it is: a job
changes far less often than three times within one status read."""


async def _same_version_status(
    conn: AsyncConnection,
    job: Any,
    read_job: Callable[[], Awaitable[Any]],
    *,
    if_none_match: str | None,
) -> tuple[Any, JobPublic | None]:
    """The status body of ``job`` from stages read at the same version of the job: when a
    change committed between the job's statement and the stages' (no snapshot spans them
    on an autocommit read), the job is read again. ``None`` for the body when the row
    read again matches ``If-None-Match``; 404 when it is gone."""
    for _ in range(READ_TRIES):
        stages = await reads.plan_stages_of_version(conn, job)
        if stages is not None:
            return job, job_status(job, stages)
        job = await read_job()
        if job is None:
            raise JobNotFoundError()
        if etag_matches(if_none_match, job.version, waiting_tag(waiting_for(job))):
            return job, None
    return job, await public_status(conn, job)


def status_headers(
    job: Any, *, now: datetime | None = None, public: JobPublic | None = None
) -> dict[str, str]:
    """ETag always; Retry-After while the job is not terminal (against ``now``, else the
    database time the row was read or written at). From the row, and from ``public``
    (the body sent with them) for what holds a queued job: the ETag names the body sent."""
    waiting = waiting_tag(public.waiting_for) if public is not None else None
    if public is None:
        waiting = waiting_tag(waiting_for(job))
    found = {"ETag": etag(job.version, waiting)}
    state = JobState(job.state)
    if not is_terminal(state):
        now = now or getattr(job, "observed_at", None) or datetime.now(UTC)
        found["Retry-After"] = str(retry_after_seconds(state, next_attempt_at(job), now))
    return found


async def answer(
    conn: AsyncConnection, outcome: MoveResult, response: Response
) -> JobPublic | ApiError:
    """The answer to a move: the status of the row the write returned (same
    connection, same transaction; nothing is re-read), or the move's problem -- returned,
    not raised, so the transaction still commits what a refusal records (a late cancel):
    raise it with :func:`settle` after the commit."""
    if isinstance(outcome, Rejected):
        if outcome.took_effect and outcome.job is not None:
            # A repeat of a move that took effect is answered like the move itself.
            return await answer_row(conn, outcome.job, response)
        if outcome.reason == RejectReason.REPEATED and outcome.job is not None:
            # The same decision took effect before: answered as a replay (like a repeated
            # signal), with the status now; nothing is recorded again.
            response.status_code = 200
            response.headers["Idempotency-Replayed"] = "true"
            return await answer_row(conn, outcome.job, response)
        return await problem_for(conn, outcome)
    return await answer_row(conn, outcome.job, response)


def settle(reply: JobPublic | ApiError) -> JobPublic:
    """The body of an :func:`answer`, or its problem raised."""
    if isinstance(reply, ApiError):
        raise reply
    return reply


def status_response(
    public: JobPublic, headers: dict[str, str], *, status_code: int = 200
) -> Response:
    """The status body serialized once, as the route's ``response_model`` would (by
    alias, nothing excluded), with ``headers``: FastAPI passes a ``Response`` through
    without validating and serializing the model again."""
    return Response(
        public.model_dump_json(by_alias=True),
        status_code=status_code,
        headers=headers,
        media_type="application/json",
    )


async def answer_row(conn: AsyncConnection, job: Any, response: Response) -> JobPublic:
    public = await public_status(conn, job)
    response.headers.update(status_headers(job, public=public))
    return public


async def problem_for(conn: AsyncConnection, outcome: Rejected) -> ApiError:
    """The one mapping of a refused move to its RFC 9457 problem."""
    if outcome.reason == RejectReason.NOT_FOUND or outcome.job is None:
        return JobNotFoundError()
    public = await public_status(conn, outcome.job)
    facts: dict[str, Any] = {"state": public.state.value, "delivery": public.delivery.state.value}
    name = outcome.transition
    if name == TransitionName.REQUEST_CANCEL and outcome.current in TERMINAL_STATES:
        return CancelTooLateError(
            f"The job is already {public.state.value}",
            job=public.model_dump(mode="json"),
            **facts,
        )
    if name == TransitionName.REQUEST_CANCEL:
        return JobStateConflictError(
            f"A {public.state.value} job is canceled by an operator decision", **facts
        )
    if name in {TransitionName.APPROVE, TransitionName.REJECT, TransitionName.RECEIVE_EVENT} and (
        public.reason in {Reason.DEADLINE_PASSED, Reason.DEADLINE_ESCALATED}
    ):
        return DecisionTooLateError(
            f"The wait's deadline passed first; the job is {public.state.value}", **facts
        )
    if outcome.reason == RejectReason.CONFLICTING:
        recorded = "rejected" if name == TransitionName.APPROVE else "approved"
        return ConflictingDecisionError(
            f"The job was {recorded} before; it is {public.state.value}",
            decision=ReviewDecision.REJECT
            if name == TransitionName.APPROVE
            else ReviewDecision.APPROVE,
            **facts,
        )
    if name == TransitionName.RECEIVE_EVENT:
        return NotAwaitingSignalError(
            f"The job is {public.state.value} ({public.reason.value}), "
            "not waiting for an external event",
            **facts,
        )
    if name in {TransitionName.APPROVE, TransitionName.REJECT}:
        return NotAwaitingReviewError(
            f"The job is {public.state.value} ({public.reason.value}), not waiting for review",
            **facts,
        )
    return JobStateConflictError(f"Not allowed while the job is {public.state.value}", **facts)


__all__ = [
    "Applied",
    "answer",
    "answer_row",
    "problem_for",
    "public_status",
    "read_status",
    "read_status_once",
    "read_status_unless_current",
    "settle",
    "status_headers",
    "status_response",
]
