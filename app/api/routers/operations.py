"""Operator actions (``operator`` role) and the queue view.

Operators act on any owner's job. Each action maps to one named transition; a job in
the wrong state answers 409 with its current state.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Response, status
from pydantic.json_schema import SkipJsonSchema

from atlas_jobs._app.api.answers import respond
from atlas_jobs._app.api.deps import NoNullBody, OperatorPrincipal, StateDep, bind_job
from atlas_jobs._app.api.responses import headers, problems
from atlas_jobs._app.services import actions, ui_sessions
from atlas_jobs._app.services.queue import queue_view
from atlas_jobs._app.services.schemas import (
    JobPublic,
    OperatorNote,
    QueuePublic,
    SessionsEnd,
    SessionsEnded,
)
from atlas_jobs._app.services.views import job_path

router = APIRouter(prefix="/v1", tags=["operations"])

_ACTION = {
    status.HTTP_202_ACCEPTED: {"description": "Done; the body is the job's status."},
    **problems(400, 403, 404, 409, 413, 415, 422),
}


def _operator_move(
    path: str, name: str, summary: str, move: Callable[..., Awaitable[actions.Moved]]
) -> None:
    """Declare ``POST path``: the operator's ``move`` (a service of
    :mod:`~atlas_jobs._app.services.actions`) on one job, with the body's optional note."""

    @router.post(
        path,
        dependencies=[NoNullBody],
        name=name,
        status_code=status.HTTP_202_ACCEPTED,
        response_model=JobPublic,
        summary=summary,
        responses=_ACTION,
    )
    async def act(
        job_id: uuid.UUID,
        state: StateDep,
        principal: OperatorPrincipal,
        response: Response,
        body: OperatorNote | SkipJsonSchema[None] = None,
    ) -> JobPublic:
        bind_job(job_id)
        moved = await move(
            state.engine,
            state.transitions,
            job_id,
            operator=principal.owner,
            note=body.note if body else None,
        )
        return respond(moved, response)


_operator_move(
    "/jobs/{job_id}/resume",
    "resume",
    "Resume an unresolved job with a new attempt budget",
    actions.resume,
)
_operator_move(
    "/jobs/{job_id}/fail", "fail", "Fail an unresolved job (operator decision)", actions.fail
)


@router.post(
    "/jobs/{job_id}/replay",
    dependencies=[NoNullBody],
    name="replay",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobPublic,
    summary="Run a terminal job again as a new job (replay_of set)",
    responses={
        status.HTTP_202_ACCEPTED: {
            "description": "The NEW job's status; Location points at it.",
            "headers": headers("Location", "Retry-After", "ETag"),
        },
        **problems(400, 403, 404, 409, 413, 415, 422),
    },
)
async def replay(
    job_id: uuid.UUID,
    state: StateDep,
    principal: OperatorPrincipal,
    response: Response,
    body: OperatorNote | SkipJsonSchema[None] = None,
) -> JobPublic:
    bind_job(job_id)
    moved = await actions.replay(
        state.engine,
        state.transitions,
        job_id,
        operator=principal.owner,
        key_id=principal.key_id,
        note=body.note if body else None,
    )
    public = respond(moved, response)
    response.headers["Location"] = job_path(public.id)
    return public


@router.post(
    "/ui-sessions:end",
    name="end-sessions",
    response_model=SessionsEnded,
    summary="Log out everywhere: end status-page sessions (one key's, one owner's, or all)",
    responses=problems(400, 403, 413, 415, 422),
)
async def end_ui_sessions(
    body: SessionsEnd, state: StateDep, principal: OperatorPrincipal
) -> SessionsEnded:
    """The sessions' cookies are refused from their next request on (the server-side
    session rows are deleted); the keys stay valid -- revoke a key to stop its API use
    too. With both `owner` and `key_id`, only that key's sessions if it is that owner's."""
    ended = await ui_sessions.end_all(state.engine, owner=body.owner, key_id=body.key_id)
    return SessionsEnded(ended=ended)


@router.get(
    "/queue",
    name="queue",
    response_model=QueuePublic,
    summary="Per kind and state: count, oldest age, leases; schedules; pending webhooks",
    responses=problems(403),
)
async def queue(state: StateDep, principal: OperatorPrincipal) -> Any:
    return await queue_view(state.engine, state.clock)
