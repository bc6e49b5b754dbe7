"""A job's answers over HTTP: the status body with its validators and polling headers,
and the one mapping of a refused move (:class:`~atlas_jobs._app.transitions.Rejected`)
to its problem."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import Response
from sqlalchemy.ext.asyncio import AsyncConnection

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
from atlas_jobs._app.lifecycle import TERMINAL_STATES, JobState, Reason, TransitionName, is_terminal
from atlas_jobs._app.services.reading import public_status
from atlas_jobs._app.services.schemas import JobPublic, ReviewDecision
from atlas_jobs._app.services.views import (
    etag,
    next_attempt_at,
    retry_after_seconds,
    waiting_for,
    waiting_tag,
)
from atlas_jobs._app.transitions import MoveResult, Rejected, RejectReason


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
