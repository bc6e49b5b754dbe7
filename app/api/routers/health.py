"""Root endpoints for orchestrators: liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from typing import Annotated

import structlog
from fastapi import APIRouter, Header, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from atlas_jobs._app.api.deps import StateDep
from atlas_jobs._app.api.errors import UnauthorizedError
from atlas_jobs._app.api.responses import public_problems
from atlas_jobs._app.metrics import REGISTRY as PROCESS_METRICS
from atlas_jobs._app.metrics import merged_exposition
from atlas_jobs._app.services.access import may_read_metrics
from atlas_jobs._app.services.readiness import readiness
from atlas_jobs._app.services.schemas import Health

router = APIRouter(tags=["health"])
log = structlog.get_logger("atlas.api.health")

READY_TIMEOUT_SECONDS = 2.0


@router.get("/livez", name="livez", response_model=Health, summary="Liveness (process only)")
async def livez() -> Health:
    return Health(status="ok")


@router.get(
    "/readyz",
    name="readyz",
    response_model=Health,
    summary="Readiness: database reachable, migrations current, not draining",
    responses={
        503: {
            "model": Health,
            "description": "Not ready; `checks` says why.",
            "content": {"application/json": {}},
        }
    },
)
async def readyz(state: StateDep) -> Response:
    found = await readiness(
        state.engine, draining=state.draining, within_seconds=READY_TIMEOUT_SECONDS
    )
    body = Health(status="ok" if found.ready else "not_ready", checks=found.checks)
    return JSONResponse(body.model_dump(), status_code=200 if found.ready else 503)


@router.get(
    "/metrics",
    name="metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={
        200: {
            "description": "Prometheus text exposition.",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        },
        **public_problems(401),
    },
)
async def metrics(
    state: StateDep,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Response:
    """Prometheus text; behind ``ATLAS_METRICS_TOKEN`` (a bearer token) when it is set."""
    if not may_read_metrics(state.settings.metrics_token, authorization):
        raise UnauthorizedError("Send Authorization: Bearer <metrics token>")
    state.metrics.listener_connected.set(1 if state.notifier.connected else 0)
    state.metrics.watchers.set(state.feeds.caps.watching)
    state.metrics.feeds.set(state.feeds.feeds)
    body = merged_exposition(state.metrics.registry, PROCESS_METRICS)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
