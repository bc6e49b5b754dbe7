"""Operators' scheduling settings (``operator`` role): per-owner shares of the fair share
and per-key concurrency limits and start rates, each change recorded with its actor
(``GET /v1/scheduling/changes``) and in force from the next claim on."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path

from atlas_jobs._app.api.deps import OperatorPrincipal, StateDep
from atlas_jobs._app.api.responses import problems
from atlas_jobs._app.api.scheduling_schemas import (
    KeyPublic,
    KeySet,
    OwnerSharePublic,
    OwnerShareSet,
    SchedulingChangePublic,
    SchedulingChangesPublic,
    SchedulingPublic,
)
from atlas_jobs._app.fairness import JOB_KEY_PATTERN
from atlas_jobs._app.services import scheduling_settings
from atlas_jobs._app.services.access import operator_actor
from atlas_jobs._app.services.schemas import RateSet

router = APIRouter(prefix="/v1/scheduling", tags=["scheduling"])

KEY_PATH = f"{JOB_KEY_PATTERN[:-1]}(/{JOB_KEY_PATTERN[1:-1]})?$"
"""A kind's key, or a job's key under it (``press/customer-7``)."""


def _key(row: Any) -> KeyPublic:
    return KeyPublic(
        key=row.key,
        declared_limit=row.declared_limit,
        declared_rate=None
        if row.declared_rate is None
        else RateSet(starts=row.declared_rate, per_seconds=row.declared_period_seconds),
        max_running=row.max_running,
        running=row.running,
        rate=row.rate,
        per_seconds=row.period_seconds,
        updated_by=row.updated_by,
        updated_at=row.updated_at,
    )


def _share(row: Any) -> OwnerSharePublic:
    return OwnerSharePublic(
        owner=row.owner, share=row.share, updated_by=row.updated_by, updated_at=row.updated_at
    )


@router.get(
    "",
    name="settings",
    response_model=SchedulingPublic,
    summary="The shares and concurrency keys in force",
    responses=problems(403),
)
async def scheduling(state: StateDep, principal: OperatorPrincipal) -> SchedulingPublic:
    shares, keys = await scheduling_settings.in_force(state.engine)
    return SchedulingPublic(owners=[_share(r) for r in shares], keys=[_key(r) for r in keys])


@router.put(
    "/owners/{owner}",
    name="set-owner-share",
    response_model=OwnerSharePublic,
    summary="Set an owner's share of the fair share (recorded with the operator)",
    responses=problems(400, 403, 413, 415, 422),
)
async def set_owner_share(
    body: OwnerShareSet,
    state: StateDep,
    principal: OperatorPrincipal,
    owner: str = Path(min_length=1, max_length=200),
) -> OwnerSharePublic:
    row = await scheduling_settings.set_share(
        state.engine,
        owner,
        body.share,
        actor=operator_actor(principal),
        note=body.note,
    )
    return _share(row)


@router.put(
    "/keys/{key:path}",
    name="set-concurrency-key",
    response_model=KeyPublic,
    summary="Set a concurrency key's limit and start rate (recorded with the operator)",
    responses=problems(400, 403, 413, 415, 422),
)
async def set_key(
    body: KeySet,
    state: StateDep,
    principal: OperatorPrincipal,
    key: str = Path(pattern=KEY_PATH, max_length=201),
) -> KeyPublic:
    row = await scheduling_settings.set_key(
        state.engine,
        key,
        scheduling_settings.KeySetting(
            body.max_running,
            None if body.rate is None else body.rate.starts,
            None if body.rate is None else body.rate.per_seconds,
        ),
        actor=operator_actor(principal),
        note=body.note,
    )
    return _key(row)


@router.get(
    "/changes",
    name="changes",
    response_model=SchedulingChangesPublic,
    summary="The operators' changes of shares and keys, newest first",
    responses=problems(403),
)
async def changes(state: StateDep, principal: OperatorPrincipal) -> SchedulingChangesPublic:
    rows = await scheduling_settings.changes(state.engine)
    return SchedulingChangesPublic(
        items=[
            SchedulingChangePublic(
                seq=r.seq,
                at=r.at,
                actor=r.actor,
                setting=r.setting,
                subject=r.subject,
                before=r.before,
                after=r.after,
                note=r.note,
            )
            for r in rows
        ]
    )
