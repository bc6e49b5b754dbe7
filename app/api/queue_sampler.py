"""Database-derived gauges, sampled on a cadence (never per scrape, never per series).

One task per API process runs :func:`atlas_jobs._app.db.reads.queue_gauges` every
``ATLAS_METRICS_SAMPLE_SECONDS`` and keeps the answer; ``/metrics`` renders the last
sample (:class:`QueueGauges`, a collector), so any number of scrapers cost the database
one indexed query per interval. The same task samples the API's connection pool.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import structlog
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app import metrics
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import reads
from atlas_jobs._app.db.engine import pool_usage
from atlas_jobs._app.lifecycle import JobState
from atlas_jobs._app.services import live_workers

log = structlog.get_logger("atlas.api.metrics")

SAMPLE_TIMEOUT_SECONDS = 5.0


@dataclass(eq=False)  # registries keep collectors in a dict: hashed by identity
class QueueGauges(Collector):
    """The last sample, rendered as gauges at scrape time."""

    rows: list[Any] = field(default_factory=list)
    sampled_at: float | None = None  # unix time of the last successful sample

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily(
            "atlas_jobs",
            "Unfinished jobs per kind and execution state (sampled; finished jobs are "
            "counted by atlas_transitions_total).",
            labels=["kind", "state"],
        )
        oldest = GaugeMetricFamily(
            "atlas_queue_oldest_claimable_age_seconds",
            "Seconds the oldest claimable queued job of a kind has waited (sampled); "
            "grows while nothing claims it.",
            labels=["kind"],
        )
        unresolved = GaugeMetricFamily(
            "atlas_jobs_unresolved",
            "Jobs waiting for an operator's decision (unresolved), all kinds (sampled).",
        )
        paused = GaugeMetricFamily(
            "atlas_kind_paused",
            "1 per paused kind (version: the paused version, or `all`); its queued jobs are "
            "not claimed, so its queue age grows on purpose (leave it out of autoscaling).",
            labels=["kind", "version"],
        )
        live = live_workers.current()
        for pause in () if live is None else live.pauses:
            paused.add_metric(
                [pause.kind, "all" if pause.version is None else str(pause.version)], 1
            )
        sampled = GaugeMetricFamily(
            "atlas_queue_sampled_timestamp_seconds",
            "Unix time of the last successful sample of the database-derived gauges.",
        )
        total_unresolved = 0
        for row in self.rows:
            jobs.add_metric([row.kind, row.state], row.job_count)
            if row.state == JobState.UNRESOLVED.value:
                total_unresolved += row.job_count
            if row.state == JobState.QUEUED.value and row.oldest_claimable_age is not None:
                oldest.add_metric([row.kind], max(0.0, float(row.oldest_claimable_age)))
        unresolved.add_metric([], total_unresolved)
        if self.sampled_at is not None:
            sampled.add_metric([], self.sampled_at)
        yield from (jobs, oldest, unresolved, paused, sampled)


async def sample_once(engine: AsyncEngine, clock: Clock, gauges: QueueGauges) -> None:
    """One sample: the queue query, and this process's pool usage."""
    in_use, waiting = pool_usage(engine)
    metrics.DB_POOL_IN_USE.labels("api").set(in_use)
    metrics.DB_POOL_WAITING.labels("api").set(waiting)
    async with asyncio.timeout(SAMPLE_TIMEOUT_SECONDS), engine.connect() as conn:
        gauges.rows = await reads.queue_gauges(conn, clock.now())
    gauges.sampled_at = time.time()


async def run_sampler(
    engine: AsyncEngine, clock: Clock, gauges: QueueGauges, *, every_seconds: float
) -> None:
    """Sample until cancelled; a failed sample keeps the previous one (its timestamp says
    how old it is) and logs one warning."""
    while True:
        try:
            await sample_once(engine, clock, gauges)
        except Exception as exc:
            log.warning("metrics.sample_failed", error_class=type(exc).__name__)
        await asyncio.sleep(every_seconds)
