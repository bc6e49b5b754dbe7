"""The scheduler: turns due schedule ticks into jobs, exactly one job per tick.

Runs in every worker process every ``ATLAS_SCHEDULER_INTERVAL_SECONDS``. One pass is one
transaction: lock a bounded batch of due schedules (``FOR UPDATE SKIP LOCKED``: several
schedulers share the work without waiting), decide each one's ticks
(:func:`atlas_jobs._app.scheduling.due_ticks`: misfire policy, DST), record the ticks in
``schedule_fires`` (``ON CONFLICT DO NOTHING``: a tick recorded before is not returned),
create the jobs of the newly recorded ticks through the one creation path
(:meth:`atlas_jobs._app.transitions.Transitions.create_many`, actor ``system:scheduler``, the
schedule and tick in the history's ``data``), and advance each schedule's
``next_fire_at``. The tick row, the job and its history commit together or not at all:
a process killed mid-pass leaves nothing behind, and the next pass -- in any process --
fires the tick once.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db import schedules, webhooks
from atlas_jobs._app.kinds import KINDS
from atlas_jobs._app.logs import get_logger
from atlas_jobs._app.scheduling import Cron, DueTicks, MisfirePolicy, OverlapPolicy, due_ticks
from atlas_jobs._app.transitions import SYSTEM_SCHEDULER, NewJob, Transitions

log = get_logger("atlas.worker.scheduler")

FIRE_RETENTION_SECONDS = 7 * 24 * 3600.0
"""How long fired-tick rows are kept (for ``GET /v1/schedules/{id}/fires``)."""


class Scheduler:
    def __init__(
        self,
        engine: AsyncEngine,
        transitions: Transitions,
        *,
        batch_size: int = 100,
        fire_retention_seconds: float = FIRE_RETENTION_SECONDS,
    ) -> None:
        self.engine = engine
        self.transitions = transitions
        self.batch_size = batch_size
        self.fire_retention_seconds = fire_retention_seconds
        self._passes = 0

    async def run_once(self) -> int:
        """Fire every due tick; returns how many jobs were created."""
        created = 0
        while True:
            made, seen = await self._batch()
            created += made
            if seen < self.batch_size:
                break
        self._passes += 1
        if self._passes % 60 == 1:
            async with self.engine.begin() as conn:
                await schedules.prune_fires(
                    conn,
                    self.transitions.clock,
                    keep_seconds=self.fire_retention_seconds,
                    limit=1000,
                )
        return created

    async def _batch(self) -> tuple[int, int]:
        clock = self.transitions.clock
        async with self.engine.begin() as conn:
            due = await schedules.lock_due(conn, clock, limit=self.batch_size)
            if not due:
                return 0, 0
            plans = [(row, self._plan(row)) for row in due]
            wanted = [(row.id, tick) for row, plan in plans if plan for tick in plan.fire]
            fresh = await schedules.record_fires(conn, wanted)
            births: list[tuple[Any, datetime]] = [
                (row, tick)
                for row, plan in plans
                if plan
                for tick in plan.fire
                if (row.id, tick) in fresh and row.kind in KINDS
            ]
            created = await self.transitions.create_many(
                conn, [_new_job(row, tick) for row, tick in births], actor=SYSTEM_SCHEDULER
            )
            links = [
                (row.id, tick, applied.job.id)
                for (row, tick), applied in zip(births, created, strict=True)
            ]
            await schedules.link_jobs(conn, links)
            await webhooks.attach(
                conn,
                [
                    (applied.job.id, row.notify_webhook_id)
                    for (row, _), applied in zip(births, created, strict=True)
                    if row.notify_webhook_id is not None
                ],
            )
            await schedules.advance(
                conn, [_advance(row, plan, links) for row, plan in plans], clock
            )
        for schedule_id, tick, job_id in links:
            log.info(
                "schedule.fired",
                schedule_id=str(schedule_id),
                tick=tick.isoformat(),
                job_id=str(job_id),
            )
        return len(links), len(due)

    @staticmethod
    def _plan(row: Any) -> DueTicks | None:
        """The ticks to fire, or ``None`` when the schedule cannot be evaluated (it is
        then disabled, visibly, rather than failing every pass of every process)."""
        if row.kind not in KINDS:
            log.warning("schedule.kind_unknown", schedule_id=str(row.id), kind=row.kind)
            return None
        try:
            plan = due_ticks(
                Cron(row.cron, row.timezone),
                next_fire_at=row.next_fire_at,
                now=row.db_now,
                policy=MisfirePolicy(row.misfire_policy),
                misfire_grace_seconds=row.misfire_grace_seconds,
                catch_up_limit=row.catch_up_limit,
            )
        except Exception as exc:
            log.warning(
                "schedule.unevaluable", schedule_id=str(row.id), error_class=type(exc).__name__
            )
            return None
        if row.overlap == OverlapPolicy.SKIP and row.last_job_unfinished and plan.fire:
            log.info(
                "schedule.overlap_skipped",
                schedule_id=str(row.id),
                last_job_id=str(row.last_job_id),
                ticks=len(plan.fire),
            )
            return DueTicks((), plan.fire[0], plan.next_fire_at)
        if plan.skipped_from is not None:
            log.info(
                "schedule.ticks_skipped",
                schedule_id=str(row.id),
                policy=row.misfire_policy,
                from_tick=plan.skipped_from.isoformat(),
                fired=len(plan.fire),
            )
        return plan


def _new_job(row: Any, tick: datetime) -> NewJob:
    spec = KINDS[row.kind]
    return NewJob(
        owner=row.owner,
        kind=row.kind,
        kind_version=row.kind_version,
        input=row.input,
        max_attempts=spec.max_attempts,
        max_elapsed_seconds=spec.max_elapsed_seconds,
        trigger={"schedule_id": str(row.id), "tick": tick.isoformat()},
    )


def _advance(
    row: Any, plan: DueTicks | None, links: list[tuple[uuid.UUID, datetime, uuid.UUID]]
) -> schedules.Advance:
    if plan is None:
        return schedules.Advance(row.id, row.next_fire_at, None, None, 0, keep_enabled=False)
    mine = [(tick, job_id) for schedule_id, tick, job_id in links if schedule_id == row.id]
    last_tick, last_job = max(mine) if mine else (None, None)
    return schedules.Advance(row.id, plan.next_fire_at, last_tick, last_job, len(mine))
