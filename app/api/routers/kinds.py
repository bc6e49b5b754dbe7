"""The job kinds (any authenticated role): versions, input schemas, live workers."""

from __future__ import annotations

from fastapi import APIRouter

from atlas_jobs._app.api.deps import CurrentPrincipal, StateDep
from atlas_jobs._app.api.responses import problems
from atlas_jobs._app.services.kinds import kinds_view
from atlas_jobs._app.services.schemas import KindsPublic

router = APIRouter(prefix="/v1", tags=["kinds"])


@router.get(
    "/kinds",
    name="list",
    response_model=KindsPublic,
    summary="The job kinds: versions, input schemas, live workers per version",
    responses=problems(),
)
async def list_kinds(state: StateDep, principal: CurrentPrincipal) -> KindsPublic:
    """Every kind the API accepts -- the version new jobs get, the versions it accepts,
    its description and input JSON Schema -- and, per version, how many live worker
    processes serve it now; versions (and kinds) only live workers serve are listed
    too, not accepted. The counts are this API process's view of the worker registry,
    at most ``ATLAS_LIVE_WORKERS_REFRESH_SECONDS`` old."""
    return await kinds_view(
        state.engine,
        state.clock,
        state.live_workers,
        window_seconds=state.settings.worker_live_window_seconds,
    )
