"""The operator's view of the queue: what waits, per kind and state, and what is due."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import reads, schedules, webhooks
from atlas_jobs._app.lifecycle import JobState
from atlas_jobs._app.services.schemas import QueueLinePublic, QueuePublic, QueueSchedulePublic


async def queue_view(engine: AsyncEngine, clock: Clock) -> QueuePublic:
    """Per kind and state: count, oldest age, leases; the next schedule ticks; pending
    webhook deliveries (the operator's queue view)."""
    async with engine.connect() as conn:
        lines = await reads.queue_view(conn, clock.now())
        upcoming = await schedules.upcoming(conn, clock, limit=100)
        pending = await webhooks.count_pending(conn)
    return QueuePublic(
        schedules=[
            QueueSchedulePublic(
                id=s.id,
                owner=s.owner,
                name=s.name,
                kind=s.kind,
                cron=s.cron,
                timezone=s.timezone,
                next_fire_at=s.next_fire_at,
                last_fire_at=s.last_fire_at,
                overdue_seconds=float(s.overdue_seconds),
            )
            for s in upcoming
        ],
        webhooks_pending=pending,
        lines=[
            QueueLinePublic(
                kind=line.kind,
                kind_version=line.kind_version,
                state=JobState(line.state),
                count=line.count,
                oldest_created_at=line.oldest_created_at,
                oldest_age_seconds=line.oldest_age_seconds,
                live_leases=line.live_leases,
                expired_leases=line.expired_leases,
            )
            for line in lines
        ],
    )
