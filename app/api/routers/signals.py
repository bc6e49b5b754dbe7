"""``POST /v1/jobs/{id}/signals``: an external event for a job waiting for one.

The owner (or an operator) delivers it with an event id and a small JSON body. The
first delivery resumes the job (``waiting`` -> ``queued``, ``event_received``) and is
answered 202; a repeat of the same event id changes nothing and is answered 200 with
the first outcome (``Idempotency-Replayed: true``). A job that is not waiting for an
event answers 409; after the wait's deadline the deadline wins (409
``decision-too-late``, recorded in the history).
"""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Response, status

from atlas_jobs._app.api.deps import CurrentPrincipal, StateDep, bind_job
from atlas_jobs._app.api.responses import headers, problems
from atlas_jobs._app.services import actions
from atlas_jobs._app.services.access import actor_for, visible_owner
from atlas_jobs._app.services.schemas import SignalCreate, SignalPublic

router = APIRouter(prefix="/v1/jobs", tags=["signals"])


@router.post(
    "/{job_id}/signals",
    name="create",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SignalPublic,
    summary="Deliver an external event to a job waiting for one",
    responses={
        status.HTTP_202_ACCEPTED: {"description": "Received: the job resumes (queued)."},
        status.HTTP_200_OK: {
            "description": "A repeat of an event id already received: its first outcome.",
            "model": SignalPublic,
            "headers": headers("Idempotency-Replayed"),
        },
        **problems(400, 404, 409, 413, 415, 422),
    },
)
async def create_signal(
    job_id: uuid.UUID,
    body: SignalCreate,
    state: StateDep,
    principal: CurrentPrincipal,
    response: Response,
) -> SignalPublic:
    bind_job(job_id)
    outcome = await actions.signal(
        state.engine,
        state.transitions,
        job_id,
        event_id=body.event_id,
        actor=actor_for(principal),
        data=body.data,
        owner=visible_owner(principal),
    )
    record = outcome.record
    if outcome.replayed:
        response.status_code = status.HTTP_200_OK
        response.headers["Idempotency-Replayed"] = "true"
    return SignalPublic(
        job_id=record.job_id,
        event_id=record.event_id,
        received_at=record.received_at,
        actor=record.actor,
        state=record.outcome["state"],
        reason=record.outcome["reason"],
    )
