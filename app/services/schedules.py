"""Schedules: cron triggers an owner manages (an operator: every owner's).

Another owner's schedule is refused exactly like an unknown one
(:class:`ScheduleNotFound`); ``owner=None`` (an operator) sees every owner's. The jobs
a schedule creates are created by the worker processes' scheduler, not here.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Row
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.apikeys import Principal, Role
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import schedules as store
from atlas_jobs._app.db.schedules import ScheduleSpec
from atlas_jobs._app.scheduling import Cron, InvalidScheduleError, check_interval, parse
from atlas_jobs._app.services.access import actor_for
from atlas_jobs._app.services.creation import (
    check_notify_target,
    checked_tags,
    concurrency_of,
    validated_input,
)
from atlas_jobs._app.services.paging import Page, fetch_size, page_of
from atlas_jobs._app.services.refusals import (
    InvalidRequest,
    NotAllowed,
    ScheduleNotFound,
    TooManySchedules,
)
from atlas_jobs._app.services.schemas import JobCreateBase

__all__ = [
    "ScheduleSpec",
    "ScheduledKind",
    "change",
    "create",
    "created_by",
    "fires",
    "instant_before",
    "job_changes",
    "owner_for",
    "page",
    "read",
    "remove",
    "scheduled_kind",
    "validated_cron",
]

_JOB = ("body", "job")
"""Where a schedule's job sits in the request body (the refusals name it)."""


@dataclass(frozen=True, slots=True)
class ScheduledKind:
    """The validated kind, version and normalized input of a schedule's job, and the
    tags each of its jobs carries (sorted, as stored)."""

    kind: str
    kind_version: int
    input: dict[str, Any]
    tags: tuple[str, ...] = ()


def scheduled_kind(job: JobCreateBase) -> ScheduledKind:
    """A schedule's job, validated now so a tick never meets an input it cannot run:
    the kind and its input, the timing relative to each tick (:func:`check_tick_timing`),
    a concurrency key only for a kind that takes one, and the tags as a creation's (a
    set: a repeat is refused), each refused naming the field."""
    spec, normalized = validated_input(job, _JOB)
    check_tick_timing(job)
    concurrency_of(spec, job.concurrency_key, _JOB)  # refused for a key it takes none of
    tags = checked_tags(job, _JOB)
    return ScheduledKind(spec.name, spec.version, normalized, tags)


def check_tick_timing(job: JobCreateBase) -> None:
    """A schedule's job is timed relative to each tick (``delay_seconds``,
    ``start_within_seconds``, the start deadline after the delay); an instant
    (``run_at``, ``start_by``) means nothing for a recurring job: refused naming it."""
    errors = [
        {
            "loc": [*_JOB, name],
            "msg": "a schedule's job is timed relative to its tick: use "
            + ("delay_seconds" if name == "run_at" else "start_within_seconds"),
            "type": "not_on_a_schedule",
        }
        for name in ("run_at", "start_by")
        if getattr(job, name) is not None
    ]
    delay, within = job.delay_seconds, job.start_within_seconds
    if delay is not None and within is not None and within <= delay:
        errors.append(
            {
                "loc": [*_JOB, "start_within_seconds"],
                "msg": "must be more than delay_seconds",
                "type": "before_run_at",
            }
        )
    if errors:
        raise InvalidRequest("The schedule's job timing is invalid", errors=errors)


def job_changes(job: JobCreateBase) -> dict[str, Any]:
    """The stored fields a new job of a schedule sets (column -> value), validated like a
    creation's (:func:`scheduled_kind`): the whole template, so a field the new job
    leaves out (tags too) is dropped."""
    found = scheduled_kind(job)
    return {
        "kind": found.kind,
        "kind_version": found.kind_version,
        "input": found.input,
        "notify_webhook_id": job.notify,
        "job_delay_seconds": job.delay_seconds,
        "job_start_within_seconds": job.start_within_seconds,
        "priority": job.priority,
        "concurrency_key": job.concurrency_key,
        "job_tags": list(found.tags),
    }


def created_by(principal: Principal) -> str:
    """Who a schedule records as its creator: ``operator:<owner>`` or ``client:<owner>``."""
    return str(actor_for(principal))


def owner_for(principal: Principal, requested: str | None) -> str:
    """Whose schedule a creation makes: the caller's own, or (operators only) another's."""
    if requested is None or requested == principal.owner:
        return principal.owner
    if not principal.has(Role.OPERATOR):
        raise NotAllowed("Only operators may create a schedule for another owner")
    return requested


def validated_cron(expression: str, timezone: str, *, min_interval_seconds: float) -> Cron:
    """The validated expression: parsed in its zone, and no ticks closer than the
    minimum interval (``ATLAS_SCHEDULE_MIN_INTERVAL_SECONDS``); refused naming the field."""
    try:
        cron = parse(expression, timezone)
        check_interval(cron, min_interval_seconds)
        return cron
    except InvalidScheduleError as exc:
        raise InvalidRequest(
            exc.message,
            errors=[{"loc": ["body", exc.field], "msg": exc.message, "type": "invalid_schedule"}],
        ) from None


async def create(
    engine: AsyncEngine,
    spec: ScheduleSpec,
    *,
    created_by: str,
    clock: Clock,
    max_per_owner: int | None,
) -> Row[Any]:
    """The new schedule; its webhook must be one of the owner's, and an owner with
    ``max_per_owner`` schedules is refused (:class:`TooManySchedules`)."""
    async with engine.begin() as conn:
        await check_notify_target(conn, spec.owner, spec.notify, ("body", "job"))
        row = await store.insert(
            conn, spec, created_by=created_by, clock=clock, max_per_owner=max_per_owner
        )
    if isinstance(row, int):
        raise TooManySchedules(owner=spec.owner, count=row, limit=max_per_owner)
    return row


async def page(
    engine: AsyncEngine,
    *,
    owner: str | None,
    enabled: bool | None,
    before_seq: int | None,
    limit: int,
) -> Page[Row[Any]]:
    """One page of schedules, newest first."""
    async with engine.connect() as conn:
        rows = await store.page(
            conn, owner=owner, enabled=enabled, before_seq=before_seq, limit=fetch_size(limit)
        )
    return page_of(rows, limit)


async def read(engine: AsyncEngine, schedule_id: uuid.UUID, *, owner: str | None) -> Row[Any]:
    async with engine.connect() as conn:
        row = await store.get(conn, schedule_id, owner=owner)
    if row is None:
        raise ScheduleNotFound()
    return row


async def change(
    engine: AsyncEngine,
    schedule_id: uuid.UUID,
    *,
    owner: str | None,
    changes: Mapping[str, Any],
    notify: uuid.UUID | None,
    cron: str | None,
    timezone: str | None,
    min_interval_seconds: float,
    clock: Clock,
) -> Row[Any]:
    """Apply ``changes`` (column -> value); a new ``notify`` endpoint must be one of the
    schedule owner's, and a new ``cron`` or ``timezone`` is validated with the other
    one of the schedule's."""
    changed = dict(changes)
    async with engine.begin() as conn:
        if notify is not None:
            current = await store.get(conn, schedule_id, owner=owner)
            if current is None:
                raise ScheduleNotFound()
            await check_notify_target(conn, current.owner, notify, ("body", "job"))
        if cron is not None or timezone is not None:
            current = await store.get(conn, schedule_id, owner=owner)
            if current is None:
                raise ScheduleNotFound()
            found = validated_cron(
                cron or current.cron,
                timezone or current.timezone,
                min_interval_seconds=min_interval_seconds,
            )
            changed["cron"], changed["timezone"] = found.expression, found.timezone
        row = await store.change(conn, schedule_id, owner=owner, changes=changed, clock=clock)
    if row is None:
        raise ScheduleNotFound()
    return row


async def remove(engine: AsyncEngine, schedule_id: uuid.UUID, *, owner: str | None) -> None:
    """Deletes the schedule (the jobs it created stay)."""
    async with engine.begin() as conn:
        removed = await store.remove(conn, schedule_id, owner=owner)
    if not removed:
        raise ScheduleNotFound()


def instant_before(value: str) -> datetime | None:
    """The instant of ``before`` in UTC; ``None`` when it lies past the last instant a
    datetime holds (``9999-12-31T23:59:59-01:00``: no bound), ``datetime.min`` (as UTC)
    when before the first (``0001-01-01T00:00:00+01:00``: nothing is earlier)."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidRequest(
            "before is not a valid instant",
            errors=[{"loc": ["query", "before"], "msg": "not an instant", "type": "datetime"}],
        ) from None
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        return None if parsed.year == datetime.max.year else datetime.min.replace(tzinfo=UTC)


async def fires(
    engine: AsyncEngine,
    schedule_id: uuid.UUID,
    *,
    owner: str | None,
    before: str | None,
    limit: int,
) -> Page[Row[Any]]:
    """One page of the schedule's fired ticks, newest first (older than ``before``, an
    RFC 3339 instant, refused naming ``query.before`` when it is none)."""
    async with engine.connect() as conn:
        if await store.get(conn, schedule_id, owner=owner) is None:
            raise ScheduleNotFound()
        rows = await store.fires(
            conn,
            schedule_id,
            before=None if before is None else instant_before(before),
            limit=fetch_size(limit),
        )
    return page_of(rows, limit)
