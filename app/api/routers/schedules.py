"""``/v1/schedules``: cron triggers that create one job per tick.

An owner manages its own schedules; an operator sees and manages every owner's and may
create one for any owner. Another owner's schedule answers 404, exactly like an unknown
one. The jobs a schedule creates belong to its owner and are created by the worker
processes' scheduler (:mod:`atlas_jobs._workers.scheduler`), exactly once per tick.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status

from atlas_jobs._app.api.deps import CurrentPrincipal, StateDep
from atlas_jobs._app.api.responses import headers, problems
from atlas_jobs._app.api.schedule_schemas import (
    ScheduleChange,
    ScheduleCreate,
    ScheduledJob,
    ScheduleFirePage,
    ScheduleFirePublic,
    SchedulePage,
    SchedulePublic,
)
from atlas_jobs._app.scheduling import FireRefusal, MisfirePolicy, OverlapPolicy
from atlas_jobs._app.services import schedules
from atlas_jobs._app.services.access import visible_owner
from atlas_jobs._app.services.paging import SCHEDULE_CURSOR
from atlas_jobs._app.services.schemas import Problem
from atlas_jobs._app.services.views import job_path

router = APIRouter(prefix="/v1/schedules", tags=["schedules"])

MAX_PAGE = 100
# RFC 3339 with the years an instant can have here (0001-9999: year 0000 matched before
# and was 422). What a pattern cannot say -- a day the month lacks (2026-02-30) -- is 422
# naming query.before.
INSTANT_PATTERN = (
    r"^([1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])-(0[1-9]|1[0-2])-"
    r"(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:"
    r"[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"
)
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {
        "model": Problem,
        "description": "Unknown schedule, or a schedule of another owner (indistinguishable).",
    }
}


def schedule_path(schedule_id: uuid.UUID) -> str:
    return f"/v1/schedules/{schedule_id}"


def _public(row: Any) -> SchedulePublic:
    return SchedulePublic(
        id=row.id,
        url=schedule_path(row.id),
        owner=row.owner,
        name=row.name,
        cron=row.cron,
        timezone=row.timezone,
        job=ScheduledJob(
            kind=row.kind,
            kind_version=row.kind_version,
            input=row.input,
            notify=row.notify_webhook_id,
            delay_seconds=row.job_delay_seconds,
            start_within_seconds=row.job_start_within_seconds,
            priority=row.priority,
            concurrency_key=row.concurrency_key,
            tags=list(row.job_tags),
        ),
        enabled=row.enabled,
        misfire_policy=MisfirePolicy(row.misfire_policy),
        misfire_grace_seconds=row.misfire_grace_seconds,
        catch_up_limit=row.catch_up_limit,
        overlap=OverlapPolicy(row.overlap),
        next_fire_at=row.next_fire_at if row.enabled else None,
        last_fire_at=row.last_fire_at,
        last_job_id=row.last_job_id,
        last_job_url=job_path(row.last_job_id) if row.last_job_id else None,
        fired_count=row.fired_count,
        refused_count=row.refused_count,
        last_refused_at=row.last_refused_at,
        last_refusal=FireRefusal(row.last_refusal) if row.last_refusal else None,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


@router.post(
    "",
    name="create",
    status_code=status.HTTP_201_CREATED,
    response_model=SchedulePublic,
    summary="Create a schedule",
    responses={
        201: {"description": "Created.", "headers": headers("Location")},
        **problems(
            400,
            403,
            409,
            413,
            415,
            422,
            models={409: Problem},
            descriptions={
                409: "The owner already has as many schedules as allowed "
                "(`too-many-schedules`, ATLAS_SCHEDULE_MAX_PER_OWNER): delete one first.",
            },
        ),
    },
)
async def create_schedule(
    body: ScheduleCreate, state: StateDep, principal: CurrentPrincipal, response: Response
) -> SchedulePublic:
    """Validate the expression, the time zone and the job now (422 naming the field), so
    a tick never meets an input it cannot run. Ticks closer than
    ATLAS_SCHEDULE_MIN_INTERVAL_SECONDS (default 10 s) are 422 naming `body.cron`; an
    owner with ATLAS_SCHEDULE_MAX_PER_OWNER schedules (default 100) gets 409
    `too-many-schedules`. A tick's job is admitted like any `POST /v1/jobs`: while the
    owner is at its cap of unfinished jobs the tick is refused and recorded
    (`refusal: owner_at_capacity` in the fire history, `refused_count` here)."""
    settings = state.settings
    cron = schedules.validated_cron(
        body.cron, body.timezone, min_interval_seconds=settings.schedule_min_interval_seconds
    )
    job = schedules.scheduled_kind(body.job)
    owner = schedules.owner_for(principal, body.owner)
    spec = schedules.ScheduleSpec(
        owner=owner,
        name=body.name,
        cron=cron,
        kind=job.kind,
        kind_version=job.kind_version,
        input=job.input,
        notify=body.job.notify,
        delay_seconds=body.job.delay_seconds,
        start_within_seconds=body.job.start_within_seconds,
        priority=body.job.priority,
        concurrency_key=body.job.concurrency_key,
        tags=job.tags,
        enabled=body.enabled,
        misfire_policy=body.misfire_policy,
        misfire_grace_seconds=body.misfire_grace_seconds,
        catch_up_limit=body.catch_up_limit,
        overlap=body.overlap,
    )
    row = await schedules.create(
        state.engine,
        spec,
        created_by=schedules.created_by(principal),
        clock=state.clock,
        max_per_owner=settings.schedule_max_per_owner,
    )
    response.headers["Location"] = schedule_path(row.id)
    return _public(row)


@router.get(
    "",
    name="list",
    response_model=SchedulePage,
    summary="List schedules (operators: every owner's)",
    responses=problems(422),
)
async def list_schedules(
    state: StateDep,
    principal: CurrentPrincipal,
    enabled: Annotated[bool | None, Query(description="Only enabled (or disabled) ones.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20,
    cursor: Annotated[
        str | None,
        Query(pattern=SCHEDULE_CURSOR.pattern, description="next_cursor of the last page."),
    ] = None,
) -> SchedulePage:
    """Newest first. Each shows its next and last tick: the operator's view of triggers."""
    found = await schedules.page(
        state.engine,
        owner=visible_owner(principal),
        enabled=enabled,
        before_seq=SCHEDULE_CURSOR.parse(cursor),
        limit=limit,
    )
    return SchedulePage(
        items=[_public(row) for row in found.shown],
        next_cursor=SCHEDULE_CURSOR.after(found, lambda row: row.seq),
    )


@router.get(
    "/{schedule_id}",
    name="read",
    response_model=SchedulePublic,
    summary="Read a schedule",
    responses={**problems(422), **_NOT_FOUND},
)
async def read_schedule(
    schedule_id: uuid.UUID, state: StateDep, principal: CurrentPrincipal
) -> SchedulePublic:
    return _public(await schedules.read(state.engine, schedule_id, owner=visible_owner(principal)))


@router.patch(
    "/{schedule_id}",
    name="change",
    response_model=SchedulePublic,
    summary="Change, pause or resume a schedule",
    responses={**problems(400, 413, 415, 422), **_NOT_FOUND},
)
async def change_schedule(
    schedule_id: uuid.UUID, body: ScheduleChange, state: StateDep, principal: CurrentPrincipal
) -> SchedulePublic:
    given = body.model_fields_set
    changes: dict[str, Any] = {
        key: getattr(body, key)
        for key in ("name", "enabled", "misfire_grace_seconds", "catch_up_limit")
        if key in given
    }
    if body.misfire_policy is not None:
        changes["misfire_policy"] = body.misfire_policy.value
    if body.overlap is not None:
        changes["overlap"] = body.overlap.value
    if body.job is not None:
        changes.update(schedules.job_changes(body.job))
    row = await schedules.change(
        state.engine,
        schedule_id,
        owner=visible_owner(principal),
        changes=changes,
        notify=body.job.notify if body.job is not None else None,
        cron=body.cron,
        timezone=body.timezone,
        min_interval_seconds=state.settings.schedule_min_interval_seconds,
        clock=state.clock,
    )
    return _public(row)


@router.delete(
    "/{schedule_id}",
    name="delete",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete a schedule (the jobs it created stay)",
    responses={204: {"description": "Deleted."}, **problems(422), **_NOT_FOUND},
)
async def delete_schedule(
    schedule_id: uuid.UUID, state: StateDep, principal: CurrentPrincipal
) -> Response:
    await schedules.remove(state.engine, schedule_id, owner=visible_owner(principal))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/{schedule_id}/fires",
    name="fires",
    response_model=ScheduleFirePage,
    summary="The ticks a schedule fired and the job each created, or why none",
    responses={**problems(422), **_NOT_FOUND},
)
async def schedule_fires(
    schedule_id: uuid.UUID,
    state: StateDep,
    principal: CurrentPrincipal,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20,
    before: Annotated[
        str | None,
        Query(pattern=INSTANT_PATTERN, description="next_before of the last page (RFC 3339)."),
    ] = None,
) -> ScheduleFirePage:
    found = await schedules.fires(
        state.engine,
        schedule_id,
        owner=visible_owner(principal),
        before=before,
        limit=limit,
    )
    return ScheduleFirePage(
        items=[
            ScheduleFirePublic(
                tick=row.fire_at,
                job_id=row.job_id,
                job_url=job_path(row.job_id) if row.job_id else None,
                recorded_at=row.created_at,
                refusal=FireRefusal(row.refusal) if row.refusal else None,
            )
            for row in found.shown
        ],
        next_before=found.next(lambda row: row.fire_at),
    )
