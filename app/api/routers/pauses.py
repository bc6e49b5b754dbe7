"""Pausing a kind (``operator`` role): no worker claims its queued jobs until resumed.

A pause holds from its commit on in every worker process (the claim reads it); the
attempts already running finish. Each held queued job's status says ``waiting_for:
paused`` (this API process at once, the others within
``ATLAS_LIVE_WORKERS_REFRESH_SECONDS``). The rules are the service's
(:mod:`atlas_jobs._app.services.pauses`); docs/protocol.md §3.9.
"""

from __future__ import annotations

from fastapi import APIRouter, Body, Path, Response, status

from atlas_jobs._app.api.deps import NoNullBody, OperatorPrincipal, StateDep
from atlas_jobs._app.api.pause_schemas import (
    KindPauseCreate,
    KindPauseEventPublic,
    KindPausePublic,
    KindPausesPublic,
    KindResumeCreate,
)
from atlas_jobs._app.api.responses import problems
from atlas_jobs._app.services.access import operator_actor

router = APIRouter(prefix="/v1", tags=["operations"])

# Both bodies are optional: no body is every version and no note.
_NO_PAUSE_BODY = Body(default_factory=KindPauseCreate)
_NO_RESUME_BODY = Body(default_factory=KindResumeCreate)
KindName = Path(min_length=1, max_length=200, description="The job kind.")


@router.post(
    "/kinds/{kind}/pause",
    dependencies=[NoNullBody],
    name="pause-kind",
    response_model=KindPausePublic,
    status_code=status.HTTP_201_CREATED,
    summary="Pause a kind (or one version): its queued jobs are not claimed until resumed",
    responses={
        status.HTTP_200_OK: {
            "model": KindPausePublic,
            "description": "It was paused already: the pause in force (first actor, time "
            "and note kept).",
        },
        status.HTTP_201_CREATED: {"description": "Paused now."},
        **problems(400, 403, 404, 413, 415, 422),
    },
)
async def pause_kind(
    state: StateDep,
    principal: OperatorPrincipal,
    response: Response,
    kind: str = KindName,
    body: KindPauseCreate = _NO_PAUSE_BODY,
) -> KindPausePublic:
    """Attempts already running finish; queued jobs stay queued with `waiting_for`
    `paused` (who, when, the note). Recorded in the pause events with the operator."""
    pause, made = await state.pauses().pause(
        kind=kind,
        version=body.version,
        actor=str(operator_actor(principal)),
        note=body.note,
    )
    if not made:
        response.status_code = status.HTTP_200_OK
    return KindPausePublic.of(pause)


@router.post(
    "/kinds/{kind}/resume",
    dependencies=[NoNullBody],
    name="resume-kind",
    response_model=KindPausePublic,
    summary="End a kind's pause: workers claim its queued jobs again at once",
    responses={
        status.HTTP_200_OK: {"description": "Resumed; the body is the pause that ended."},
        **problems(400, 403, 404, 413, 415, 422),
    },
)
async def resume_kind(
    state: StateDep,
    principal: OperatorPrincipal,
    kind: str = KindName,
    body: KindResumeCreate = _NO_RESUME_BODY,
) -> KindPausePublic:
    """Ends the pause of that version (or, without one, the every-version pause) and
    wakes idle workers of the kind. A version's own pause and the kind's every-version
    pause are separate: each is resumed by name. `404` when no such pause is in force."""
    ended = await state.pauses().resume(
        kind=kind,
        version=body.version,
        actor=str(operator_actor(principal)),
        note=body.note,
    )
    return KindPausePublic.of(ended)


@router.get(
    "/pauses",
    name="list-pauses",
    response_model=KindPausesPublic,
    summary="The paused kinds, and the latest pauses and resumes",
    responses=problems(403),
)
async def list_pauses(state: StateDep, principal: OperatorPrincipal) -> KindPausesPublic:
    found, latest = await state.pauses().listing()
    return KindPausesPublic(
        items=[KindPausePublic.of(p) for p in found],
        events=[KindPauseEventPublic.of(e) for e in latest],
    )
