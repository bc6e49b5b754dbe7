"""``/v1/webhooks`` (endpoints an owner registers) and ``/v1/jobs/{id}/notifications``
(the deliveries of one job's events). Another owner's endpoint or job answers 404,
exactly like an unknown one; operators see every owner's."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status

from atlas_jobs._app.api.deps import CurrentPrincipal, StateDep, bind_job
from atlas_jobs._app.api.responses import headers, problems
from atlas_jobs._app.api.webhook_schemas import (
    NotificationPage,
    NotificationPublic,
    WebhookCreate,
    WebhookCreated,
    WebhookPage,
    WebhookPublic,
)
from atlas_jobs._app.services import webhooks as endpoints
from atlas_jobs._app.services.access import actor_for, visible_owner
from atlas_jobs._app.services.paging import WEBHOOK_CURSOR
from atlas_jobs._app.services.schemas import Problem

router = APIRouter(prefix="/v1", tags=["webhooks"])

MAX_PAGE = 100
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {
        "model": Problem,
        "description": "Unknown webhook, or one of another owner (indistinguishable).",
    }
}


def webhook_path(webhook_id: uuid.UUID) -> str:
    return f"/v1/webhooks/{webhook_id}"


def _public(row: Any) -> WebhookPublic:
    return WebhookPublic(
        id=row.id,
        owner=row.owner,
        url=row.url,
        description=row.description,
        created_at=row.created_at,
    )


@router.post(
    "/webhooks",
    name="create",
    status_code=status.HTTP_201_CREATED,
    response_model=WebhookCreated,
    summary="Register a webhook endpoint (its secret is shown once)",
    responses={
        201: {"description": "Registered.", "headers": headers("Location")},
        **problems(400, 413, 415, 422),
    },
)
async def create_webhook(
    body: WebhookCreate, state: StateDep, principal: CurrentPrincipal, response: Response
) -> WebhookCreated:
    allowed, internal = state.settings.webhook_hosts
    row, secret = await endpoints.register(
        state.engine,
        owner=principal.owner,
        url=body.url,
        description=body.description,
        created_by=str(actor_for(principal)),
        allowed_hosts=allowed,
        internal_hosts=internal,
        resolve=state.resolve,
    )
    response.headers["Location"] = webhook_path(row.id)
    return WebhookCreated(**_public(row).model_dump(), secret=secret)


@router.get(
    "/webhooks",
    name="list",
    response_model=WebhookPage,
    summary="List webhook endpoints (operators: every owner's)",
    responses=problems(422),
)
async def list_webhooks(
    state: StateDep,
    principal: CurrentPrincipal,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20,
    cursor: Annotated[
        str | None,
        Query(pattern=WEBHOOK_CURSOR.pattern, description="next_cursor of the last page."),
    ] = None,
) -> WebhookPage:
    found = await endpoints.page(
        state.engine,
        owner=visible_owner(principal),
        before_seq=WEBHOOK_CURSOR.parse(cursor),
        limit=limit,
    )
    return WebhookPage(
        items=[_public(row) for row in found.shown],
        next_cursor=WEBHOOK_CURSOR.after(found, lambda row: row.seq),
    )


@router.get(
    "/webhooks/{webhook_id}",
    name="read",
    response_model=WebhookPublic,
    summary="Read a webhook endpoint (without its secret)",
    responses={**problems(422), **_NOT_FOUND},
)
async def read_webhook(
    webhook_id: uuid.UUID, state: StateDep, principal: CurrentPrincipal
) -> WebhookPublic:
    return _public(await endpoints.read(state.engine, webhook_id, owner=visible_owner(principal)))


@router.delete(
    "/webhooks/{webhook_id}",
    name="delete",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete a webhook endpoint (its undelivered notifications are dropped)",
    responses={204: {"description": "Deleted."}, **problems(422), **_NOT_FOUND},
)
async def delete_webhook(
    webhook_id: uuid.UUID, state: StateDep, principal: CurrentPrincipal
) -> Response:
    await endpoints.remove(state.engine, webhook_id, owner=visible_owner(principal))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/jobs/{job_id}/notifications",
    name="notifications",
    response_model=NotificationPage,
    summary="The webhook deliveries of a job's events",
    responses=problems(404, 422),
)
async def job_notifications(
    job_id: uuid.UUID, state: StateDep, principal: CurrentPrincipal
) -> NotificationPage:
    bind_job(job_id)
    rows = await endpoints.deliveries(state.engine, job_id, owner=visible_owner(principal))
    return NotificationPage(
        items=[
            NotificationPublic(
                id=row.id,
                webhook_id=row.webhook_id,
                event=row.event,
                state=row.state,
                attempts=row.attempts,
                last_status_code=row.last_status_code,
                last_error=row.last_error,
                next_attempt_at=endpoints.next_attempt_at(row),
                created_at=row.created_at,
                delivered_at=row.delivered_at,
            )
            for row in rows
        ]
    )
