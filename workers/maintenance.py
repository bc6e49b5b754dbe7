"""The worker process's maintenance services: one flat list, one loop for each.

Every worker process runs every service (``SKIP LOCKED``, advisory locks and the tick
rows make that safe): each is an object with ``run_once`` that does one pass, and
:func:`run_every` runs it on its interval. A failed pass is logged and the next one
runs on time. :func:`build` makes the list from the settings; a service a setting turns
off is simply not in it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app import metrics
from atlas_jobs._app.db.engine import pool_usage
from atlas_jobs._app.logs import get_logger
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.storage import ResultStore
from atlas_jobs._app.transitions import Transitions
from atlas_jobs._workers.activity import ActivityRollup
from atlas_jobs._workers.bulk_runner import BulkRunner
from atlas_jobs._workers.pruner import Pruner
from atlas_jobs._workers.reaper import Reaper
from atlas_jobs._workers.reindexer import MIB, Reindexer
from atlas_jobs._workers.scheduler import Scheduler
from atlas_jobs._workers.sweeper import Sweeper
from atlas_jobs._workers.vacuumer import Vacuumer
from atlas_jobs._workers.webhook_sender import RenderStatus, WebhookSender

log = get_logger("atlas.worker.pool")

POOL_SAMPLE_SECONDS = 5.0


class Service(Protocol):
    """One pass of a maintenance duty."""

    async def run_once(self) -> object: ...


@dataclass(frozen=True, slots=True)
class Every:
    """A service and the seconds between its passes (the first comes after one)."""

    name: str
    seconds: float
    service: Service


async def run_every(every: Every) -> None:
    """Run ``every.service`` once per interval until cancelled; never raises otherwise."""
    while True:
        await asyncio.sleep(every.seconds)
        try:
            await every.service.run_once()
        except Exception as exc:
            log.warning("maintenance.failed", error_class=type(exc).__name__)


def start(services: Sequence[Every]) -> list[asyncio.Task[None]]:
    """A task per service, named after it."""
    return [asyncio.create_task(run_every(every), name=every.name) for every in services]


class PoolGauges:
    """Pool gauges (``atlas_db_pool_*{pool="worker"}``; summed over live worker
    processes under ``serve``)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def run_once(self) -> None:
        in_use, waiting = pool_usage(self.engine)
        metrics.DB_POOL_IN_USE.labels("worker").set(in_use)
        metrics.DB_POOL_WAITING.labels("worker").set(waiting)


@dataclass(frozen=True, slots=True)
class Maintenance:
    """The services of one worker process, by name, and :attr:`services`: the list
    the pool runs (the pruner, vacuumer and reindexer are steps of the sweeper's pass)."""

    reaper: Reaper
    sweeper: Sweeper
    pruner: Pruner
    scheduler: Scheduler
    gauges: PoolGauges
    webhooks: WebhookSender | None
    bulk: BulkRunner
    services: tuple[Every, ...]


def build(
    settings: Settings,
    *,
    worker_id: str,
    engine: AsyncEngine,
    statements: AsyncEngine,
    transitions: Transitions,
    store: ResultStore,
    render_status: RenderStatus | None,
) -> Maintenance:
    """Every service of a worker process, as its settings configure them."""
    reaper = Reaper(engine, transitions)
    pruner = Pruner(
        statements,  # one statement per batch: no BEGIN/COMMIT round trips
        transitions.clock,
        keep_seconds=settings.result_ttl_seconds + settings.finished_job_retention_seconds,
        batch_size=settings.prune_batch_size,
    )
    sweeper = Sweeper(
        engine,
        transitions,
        store,
        pruner=pruner,
        forget_workers_seconds=settings.worker_forget_seconds,
        reindexer=(
            Reindexer(
                engine,
                min_bytes=settings.index_rebuild_min_mb * MIB,
                bytes_per_row=settings.index_rebuild_bytes_per_row,
                check_seconds=settings.index_rebuild_check_seconds,
            )
            if settings.index_rebuild_min_mb > 0
            else None
        ),
        vacuumer=(
            Vacuumer(
                engine,
                dead_rows=settings.vacuum_dead_rows,
                check_seconds=settings.vacuum_check_seconds,
            )
            if settings.vacuum_dead_rows > 0
            else None
        ),
    )
    scheduler = Scheduler(
        engine, transitions, admission_cap=settings.admission_max_active_per_owner
    )
    gauges = PoolGauges(engine)
    webhooks = (
        WebhookSender(engine, transitions.clock, settings, render_status)
        if render_status is not None
        else None
    )
    bulk = BulkRunner(
        engine,
        transitions,
        worker_id=worker_id,
        batch_size=settings.bulk_batch_size,
        lease_seconds=settings.bulk_lease_seconds,
    )
    services = [
        Every("reaper", settings.reaper_interval_seconds, reaper),
        Every("bulk-operations", settings.bulk_interval_seconds, bulk),
        Every("sweeper", settings.sweeper_interval_seconds, sweeper),
        Every("pool-gauges", POOL_SAMPLE_SECONDS, gauges),
        Every("scheduler", settings.scheduler_interval_seconds, scheduler),
        Every(
            "activity",
            settings.activity_interval_seconds,
            ActivityRollup(engine, transitions.clock),
        ),
    ]
    if webhooks is not None:
        services.append(Every("webhooks", settings.webhook_interval_seconds, webhooks))
    return Maintenance(reaper, sweeper, pruner, scheduler, gauges, webhooks, bulk, tuple(services))
