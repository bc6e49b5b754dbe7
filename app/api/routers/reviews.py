"""``POST /v1/jobs/{id}/review``: a reviewer approves or rejects a job at its gate."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Response, status

from atlas_jobs._app.api.answers import respond
from atlas_jobs._app.api.deps import ReviewerPrincipal, StateDep, bind_job
from atlas_jobs._app.api.responses import headers, problems
from atlas_jobs._app.services import actions
from atlas_jobs._app.services.schemas import JobPublic, ReviewCreate, ReviewDecision

router = APIRouter(prefix="/v1/jobs", tags=["reviews"])


@router.post(
    "/{job_id}/review",
    name="create",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobPublic,
    summary="Approve or reject a job waiting for review",
    responses={
        status.HTTP_200_OK: {
            "model": JobPublic,
            "description": "A replay: the same decision took effect before; nothing changed "
            "(`Idempotency-Replayed: true`), the body is the status now.",
            "headers": headers("Idempotency-Replayed"),
        },
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
    """Only a job waiting with reason `review` can be decided. The same decision repeated
    after it took effect is a replay: 200 with the status now and
    `Idempotency-Replayed: true`, nothing recorded again. The other decision after one
    took effect is 409 `conflicting-decision` (the problem names the `decision` that
    took effect); any other state or wait is 409 with the current state. A decision
    that arrives after the review deadline loses to it (the deadline's rule is applied first): 409
    `decision-too-late`, and the late decision is recorded in the history. With the
    default review scope a reviewer decides its own owner's jobs only: another owner's
    job is 404, as for any read. With four-eyes reviews on (`ATLAS_REVIEW_FOUR_EYES`),
    an approval by the holder who submitted the job, with any of their keys, or by a
    key without a holder, is 403 `four-eyes`."""
    bind_job(job_id)
    moved = await actions.review(
        state.engine,
        state.transitions,
        job_id,
        approve=body.decision == ReviewDecision.APPROVE,
        reviewer=principal,
        note=body.note,
        policy=actions.ReviewPolicy(
            scope=state.settings.review_scope, four_eyes=state.settings.review_four_eyes
        ),
    )
    return respond(moved, response)
