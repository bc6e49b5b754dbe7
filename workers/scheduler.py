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

A tick's job is admitted like any other creation: with the per-owner cap
(``ATLAS_ADMISSION_MAX_ACTIVE_PER_OWNER``) applied by the same statement
(``admission_cap``, one owner at a time, owners in sorted order so two schedulers take
the owners' admission locks in one order). Ticks beyond the cap are *refused*, oldest
admitted first: the tick stays recorded with ``refusal = 'owner_at_capacity'`` (its fire
history shows it), the schedule counts it (``refused_count``, ``last_refused_at``), the
metric ``atlas_schedule_fires_total{outcome="owner_at_capacity"}`` counts it and a
warning is logged. A refused tick is not fired later: the schedule goes on with its next
tick, as ``POST /v1/jobs`` refused with 429 creates nothing.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from atlas_jobs._app import metrics
from atlas_jobs._app.db import schedules, webhooks
from atlas_jobs._app.fairness import job_key
from atlas_jobs._app.kinds import KINDS
from atlas_jobs._app.logs import get_logger
from atlas_jobs._app.scheduling import (
    Cron,
    DueTicks,
    FireRefusal,
    MisfirePolicy,
    OverlapPolicy,
    due_ticks,
)
from atlas_jobs._app.transitions import (
    SYSTEM_SCHEDULER,
    Applied,
    NewJob,
    OwnerAtCapacity,
    Transitions,
)

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
        admission_cap: int | None = None,
    ) -> None:
        self.engine = engine
        self.transitions = transitions
        self.batch_size = batch_size
        self.fire_retention_seconds = fire_retention_seconds
        self.admission_cap = admission_cap
        """The per-owner cap of unfinished jobs (``None``: none)."""
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
            wanted_births: list[tuple[Any, datetime]] = [
                (row, tick)
                for row, plan in plans
                if plan
                for tick in plan.fire
                if (row.id, tick) in fresh and row.kind in KINDS
            ]
            births, created, refused = await self._admit(conn, wanted_births)
            links = [
                (row.id, tick, applied.job.id)
                for (row, tick), applied in zip(births, created, strict=True)
            ]
            await schedules.link_jobs(conn, links)
            await schedules.refuse_fires(
                conn, [(row.id, tick) for row, tick in refused], FireRefusal.OWNER_AT_CAPACITY
            )
            await webhooks.attach(
                conn,
                [
                    (applied.job.id, row.notify_webhook_id)
                    for (row, _), applied in zip(births, created, strict=True)
                    if row.notify_webhook_id is not None
                ],
            )
            await schedules.advance(
                conn, [_advance(row, plan, links, refused) for row, plan in plans], clock
            )
        for schedule_id, tick, job_id in links:
            log.info(
                "schedule.fired",
                schedule_id=str(schedule_id),
                tick=tick.isoformat(),
                job_id=str(job_id),
            )
        for row, tick in refused:
            log.warning(
                "schedule.fire_refused",
                schedule_id=str(row.id),
                tick=tick.isoformat(),
                reason=FireRefusal.OWNER_AT_CAPACITY.value,
                cap=self.admission_cap,
            )
        if links:
            metrics.SCHEDULE_FIRES.labels("created").inc(len(links))
        if refused:
            metrics.SCHEDULE_FIRES.labels(FireRefusal.OWNER_AT_CAPACITY.value).inc(len(refused))
        return len(links), len(due)

    async def _admit(
        self, conn: AsyncConnection, births: list[tuple[Any, datetime]]
    ) -> tuple[list[tuple[Any, datetime]], list[Applied], list[tuple[Any, datetime]]]:
        """Create the jobs of ``births`` that the per-owner cap admits, oldest tick first:
        (the ticks with a job, their creations, the ticks refused). One creation
        statement per owner, and a second one with the room it reported when the whole
        batch did not fit; the admission lock of each owner is held to the commit."""
        if self.admission_cap is None:
            unlimited = await self.transitions.create_many(
                conn, [_new_job(row, tick) for row, tick in births], actor=SYSTEM_SCHEDULER
            )
            return births, unlimited, []
        by_owner: dict[str, list[tuple[Any, datetime]]] = {}
        for row, tick in sorted(births, key=lambda birth: birth[1]):
            by_owner.setdefault(row.owner, []).append((row, tick))
        admitted: list[tuple[Any, datetime]] = []
        created: list[Applied] = []
        refused: list[tuple[Any, datetime]] = []
        for owner in sorted(by_owner):  # one lock order for every scheduler
            pending = by_owner[owner]
            for _ in range(2):  # all of them; else as many as the refusal said fit
                try:
                    made = await self.transitions.create_many(
                        conn,
                        [_new_job(row, tick) for row, tick in pending],
                        actor=SYSTEM_SCHEDULER,
                        admission_cap=self.admission_cap,
                    )
                except OwnerAtCapacity as full:
                    room = max(0, self.admission_cap - full.unfinished)
                    refused += pending[room:]
                    pending = pending[:room]
                    if not pending:
                        break
                    continue
                admitted += pending
                created += made
                break
            else:
                refused += pending
        return admitted, created, refused

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
        priority=row.priority,
        concurrency_key=None
        if spec.concurrency_key is None
        else job_key(spec.concurrency_key, row.concurrency_key),
        concurrency_limit=spec.concurrency_limit,
        concurrency_rate=spec.concurrency_rate,
        concurrency_period_seconds=spec.concurrency_period_seconds,
        tags=tuple(row.job_tags),
        trigger={"schedule_id": str(row.id), "tick": tick.isoformat()},
        run_at=_after(tick, row.job_delay_seconds),
        start_by=_after(tick, row.job_start_within_seconds),
    )


def _after(tick: datetime, seconds: int | None) -> datetime | None:
    """A moment relative to the tick (not to when the scheduler got to it: a caught-up
    tick's job keeps the deadline its tick gave it)."""
    return None if seconds is None else tick + timedelta(seconds=seconds)


def _advance(
    row: Any,
    plan: DueTicks | None,
    links: list[tuple[uuid.UUID, datetime, uuid.UUID]],
    refused: list[tuple[Any, datetime]],
) -> schedules.Advance:
    if plan is None:
        return schedules.Advance(row.id, row.next_fire_at, None, None, 0, keep_enabled=False)
    mine = [(tick, job_id) for schedule_id, tick, job_id in links if schedule_id == row.id]
    last_tick, last_job = max(mine) if mine else (None, None)
    not_mine = [tick for other, tick in refused if other.id == row.id]
    return schedules.Advance(
        row.id,
        plan.next_fire_at,
        last_tick,
        last_job,
        len(mine),
        refused=len(not_mine),
        last_refused_at=max(not_mine) if not_mine else None,
        last_refusal=FireRefusal.OWNER_AT_CAPACITY if not_mine else None,
    )
