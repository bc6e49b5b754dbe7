"""``POST /v1/jobs/{id}/review``: a reviewer approves or rejects a job at its gate."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Response, status
from sqlalchemy import select

from app.api.deps import ReviewerPrincipal, StateDep, bind_job
from app.api.errors import JobNotFoundError, NotAwaitingReviewError
from app.api.reading import read_status, status_headers
from app.api.responses import problems
from app.api.schemas import JobPublic, ReviewCreate, ReviewDecision
from app.db.schema import jobs
from app.lifecycle import JobState, Reason
from app.transitions import Actor, Applied

router = APIRouter(prefix="/v1/jobs", tags=["reviews"])


@router.post(
    "/{job_id}/review",
    name="create",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobPublic,
    summary="Approve or reject a job waiting for review",
    responses={
        status.HTTP_202_ACCEPTED: {"description": "Approved (queued) or rejected (failed)."},
        **problems(400, 403, 404, 409, 413, 415, 422),
    },
)
async def create_review(
    job_id: uuid.UUID,
    body: ReviewCreate,
    state: StateDep,
    principal: ReviewerPrincipal,
    response: Response,
) -> JobPublic:
    bind_job(job_id)
    actor = Actor("reviewer", principal.owner)
    async with state.engine.begin() as conn:
        # Lock the row first (the transitions' lock order: jobs row first) so the
        # "is it a review wait?" check and the move see the same state.
        current = (
            await conn.execute(
                select(jobs.c.state, jobs.c.reason).where(jobs.c.id == job_id).with_for_update()
            )
        ).first()
        if current is None:
            raise JobNotFoundError()
        awaiting = current.state == JobState.WAITING.value and current.reason == Reason.REVIEW.value
        outcome = None
        if awaiting:
            if body.decision == ReviewDecision.APPROVE:
                outcome = await state.transitions.approve(conn, job_id, actor=actor, note=body.note)
            else:
                outcome = await state.transitions.reject(conn, job_id, actor=actor, note=body.note)
    async with state.engine.connect() as conn:
        job, public = await read_status(conn, job_id, owner=None)
    if not isinstance(outcome, Applied):
        raise NotAwaitingReviewError(
            f"The job is {public.state.value} ({public.reason.value}), not waiting for review",
            state=public.state.value,
            delivery=public.delivery.state.value,
        )
    response.headers.update(status_headers(job, public))
    return public
