"""The worker process: claims jobs, runs them, heartbeats, reaps, sweeps, drains.

Main loop: while there are free slots, claim up to ``min(free, claim_batch)`` jobs in one
short statement (:meth:`app.transitions.Transitions.claim`), start a task per job, and
when the queue has nothing for us, sleep until ``atlas_work`` is notified or the poll
interval passes. No work ever happens inside the claim transaction.

Beside it run one heartbeat loop for every held attempt, a reaper, a sweeper and a
scheduler (every process runs them; ``SKIP LOCKED`` and the tick rows make that safe)
and the LISTEN connection.

SIGTERM/SIGINT: stop claiming; every running job stops at its next safe point and is
released (back to ``queued``, attempt not charged) -- a job already publishing finishes.
After ``ATLAS_SHUTDOWN_GRACE_SECONDS`` the jobs still running are interrupted and
released. Then the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from app import metrics, tracing
from app.clock import Clock
from app.db import reads
from app.db.engine import (
    WORKER_SESSION_SETTINGS,
    create_engine,
    libpq_url,
    pool_usage,
    resolve_database_url,
    single_statements,
)
from app.logs import get_logger
from app.settings import Settings
from app.storage import make_store
from app.transitions import Actor, Transitions
from workers.completer import Completer
from workers.context import JobContext
from workers.handlers import Handler, registry
from workers.heartbeat import Heartbeat
from workers.listener import WorkListener
from workers.pruner import Pruner
from workers.reaper import Reaper
from workers.runner import JobRunner
from workers.scheduler import Scheduler
from workers.sweeper import Sweeper
from workers.webhook_sender import RenderStatus, WebhookSender

log = get_logger("atlas.worker.pool")

POOL_SAMPLE_SECONDS = 5.0


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class WorkerPool:
    """One worker process's pool of ``concurrency`` job slots over one database."""

    def __init__(
        self,
        settings: Settings,
        *,
        database_url: str,
        concurrency: int,
        worker_id: str | None = None,
        claim_batch: int | None = None,
        handlers: dict[str, Handler] | None = None,
        clock: Clock | None = None,
        render_status: RenderStatus | None = None,
    ) -> None:
        self.settings = settings
        self.database_url = database_url
        self.concurrency = concurrency
        self.claim_batch = claim_batch or min(concurrency, 100)
        self._min_claim = max(1, self.claim_batch // 4)
        self.worker_id = worker_id or default_worker_id()
        self.handlers = handlers if handlers is not None else registry()
        self.engine: AsyncEngine = create_engine(
            database_url,
            pool_size=concurrency + 4,
            application_name=f"atlas-worker {self.worker_id}"[:63],
            server_settings=WORKER_SESSION_SETTINGS,
            pre_ping=False,  # one round trip less per transaction; see create_engine
        )
        tracing.instrument_engine(self.engine)  # SQL spans (tracing on), under attempts
        self.statements = single_statements(self.engine)
        self.transitions = Transitions(clock or Clock(), lease_seconds=settings.lease_seconds)
        self.store = make_store(settings)
        self.actor = Actor("worker", self.worker_id)
        self.completer = Completer(
            self.statements,
            self.transitions,
            actor=self.actor,
            ttl_seconds=settings.result_ttl_seconds,
        )
        self.runner = JobRunner(
            completer=self.completer,
            on_publishing=self._publishing,
            engine=self.engine,
            transitions=self.transitions,
            store=self.store,
            settings=settings,
            handlers=self.handlers,
            actor=self.actor,
        )
        # Heartbeats have a connection of their own: a pool busy with job work (or a
        # burst of publications) never makes a live worker miss its beat and lose leases.
        self.heartbeat_engine: AsyncEngine = create_engine(
            database_url,
            pool_size=1,
            max_overflow=0,
            application_name=f"atlas-heartbeat {self.worker_id}"[:63],
            server_settings=WORKER_SESSION_SETTINGS,
            pre_ping=False,
        )
        self.heartbeat = Heartbeat(self.heartbeat_engine, self.transitions, self._held, self._lose)
        self.reaper = Reaper(self.engine, self.transitions)
        self.pruner = Pruner(
            self.statements,  # one statement per batch: no BEGIN/COMMIT round trips
            self.transitions.clock,
            keep_seconds=settings.result_ttl_seconds + settings.finished_job_retention_seconds,
            batch_size=settings.prune_batch_size,
        )
        self.sweeper = Sweeper(self.engine, self.transitions, self.store, pruner=self.pruner)
        self.scheduler = Scheduler(self.engine, self.transitions)
        self.webhooks = (
            WebhookSender(self.engine, self.transitions.clock, settings, render_status)
            if render_status is not None
            else None
        )
        self._running: dict[uuid.UUID, tuple[JobContext, asyncio.Task[Any]]] = {}
        self._wake = asyncio.Event()
        self._slot_freed = asyncio.Event()

    # -- callbacks ----------------------------------------------------------------------

    def _held(self) -> dict[uuid.UUID, JobContext]:
        return {job_id: ctx for job_id, (ctx, _) in self._running.items()}

    def _lose(self, ctx: JobContext) -> None:
        """The heartbeat found the lease gone: stop the job task; it writes nothing more."""
        ctx.mark_lost()
        entry = self._running.get(ctx.job_id)
        if entry is not None and entry[0] is ctx:
            entry[1].cancel()

    def _publishing(self, ctx: JobContext) -> None:
        """The job's work is done; only its publication is in flight. Its slot is free
        for the next claim, so claiming overlaps the commit of finished jobs."""
        self._slot_freed.set()

    def _free_slots(self) -> int:
        working = sum(1 for ctx, _ in self._running.values() if not ctx.publishing)
        # Publications in flight are bounded too: at most one extra slot set of them.
        return min(self.concurrency - working, 2 * self.concurrency - len(self._running))

    async def sample_pool(self) -> None:
        """Pool gauges (``atlas_db_pool_*{pool="worker"}``; summed over live worker
        processes under ``serve``)."""
        in_use, waiting = pool_usage(self.engine)
        metrics.DB_POOL_IN_USE.labels("worker").set(in_use)
        metrics.DB_POOL_WAITING.labels("worker").set(waiting)

    def wake(self) -> None:
        self._wake.set()

    # -- the main loop ------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        log.info("worker.started", worker_id=self.worker_id, concurrency=self.concurrency)
        kinds = {key.split("@", 1)[0] for key in self.handlers}
        listener = WorkListener(libpq_url(self.database_url), kinds=kinds, wake=self.wake)
        background = [
            asyncio.create_task(listener.run(), name="listener"),
            asyncio.create_task(self.heartbeat.run(), name="heartbeat"),
            asyncio.create_task(self.completer.run(), name="completer"),
            asyncio.create_task(
                self._every(self.settings.reaper_interval_seconds, self.reaper.run_once),
                name="reaper",
            ),
            asyncio.create_task(
                self._every(self.settings.sweeper_interval_seconds, self.sweeper.run_once),
                name="sweeper",
            ),
            asyncio.create_task(
                self._every(POOL_SAMPLE_SECONDS, self.sample_pool), name="pool-gauges"
            ),
            asyncio.create_task(
                self._every(self.settings.scheduler_interval_seconds, self.scheduler.run_once),
                name="scheduler",
            ),
        ]
        if self.webhooks is not None:
            background.append(
                asyncio.create_task(
                    self._every(self.settings.webhook_interval_seconds, self.webhooks.run_once),
                    name="webhooks",
                )
            )
        try:
            await self._claim_loop(stop)
            await self._drain()
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await self.engine.dispose()
            await self.heartbeat_engine.dispose()
            log.info("worker.stopped", worker_id=self.worker_id)

    async def _claim_loop(self, stop: asyncio.Event) -> None:
        keys = sorted(self.handlers)
        while not stop.is_set():
            free = self._free_slots()
            if free <= 0 or (self._running and free < self._min_claim):
                # Wait for a worthwhile batch rather than claiming jobs one by one
                # while others are finishing (they free their slots within moments).
                self._slot_freed.clear()
                await _first(stop.wait(), self._slot_freed.wait())
                continue
            want = min(free, self.claim_batch)
            self._wake.clear()  # before claiming: a notify during the claim is kept
            try:
                async with self.statements.connect() as conn:  # one statement
                    rows = await self.transitions.claim(
                        conn, worker_id=self.worker_id, handlers=keys, limit=want
                    )
            except Exception as exc:  # database unreachable: back off, keep going
                log.warning("claim.failed", error_class=type(exc).__name__)
                rows = []
                await _first(stop.wait(), asyncio.sleep(self.settings.poll_interval_seconds))
                continue
            for row in rows:
                self._start(row)
            if len(rows) < want:
                await _first(
                    stop.wait(),
                    self._wake.wait(),
                    asyncio.sleep(self.settings.poll_interval_seconds),
                )

    def _start(self, row: Any) -> None:
        ctx = self.runner.context(row)
        task = asyncio.create_task(self._run_job(ctx), name=f"job-{ctx.job_id}")
        self._running[ctx.job_id] = (ctx, task)

    async def _run_job(self, ctx: JobContext) -> None:
        try:
            with tracing.attempt_span(
                await self._traceparent(ctx),
                job_id=str(ctx.job_id),
                attempt_id=str(ctx.attempt_id),
                kind=ctx.job.kind,
                attempt=ctx.job.attempt,
            ):
                outcome = await self.runner.run(ctx)
            metrics.ATTEMPTS.labels(ctx.job.kind, outcome.value).inc()
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # an ending could not be written: the reaper recovers it
            log.error("job.ending_failed", job_id=str(ctx.job_id), error_class=type(exc).__name__)
        finally:
            entry = self._running.get(ctx.job_id)
            if entry is not None and entry[0] is ctx:
                del self._running[ctx.job_id]
            self._slot_freed.set()

    async def _traceparent(self, ctx: JobContext) -> str | None:
        """The trace the job's creation belongs to (one read per attempt, tracing on)."""
        if not tracing.enabled():
            return None
        try:
            async with self.engine.connect() as conn:
                return await reads.creation_traceparent(conn, ctx.job_id)
        except Exception:  # the attempt runs anyway, in a trace of its own
            return None

    async def _drain(self) -> None:
        """Shutdown: stop at safe points and release; interrupt what the grace cannot."""
        if not self._running:
            return
        log.info("worker.draining", jobs=len(self._running))
        for ctx, _ in self._running.values():
            ctx.draining = True
        tasks = [task for _, task in self._running.values()]
        _, pending = await asyncio.wait(tasks, timeout=self.settings.shutdown_grace_seconds)
        for ctx, task in list(self._running.values()):
            if task in pending and not ctx.publishing:
                task.cancel()  # JobRunner releases it (shielded write)
        if pending:
            await asyncio.wait(pending)

    @staticmethod
    async def _every(seconds: float, job: Callable[[], Awaitable[object]]) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                await job()
            except Exception as exc:
                log.warning("maintenance.failed", error_class=type(exc).__name__)


async def _first(*waits: Awaitable[object]) -> None:
    """Wait until the first of ``waits`` completes; cancel the rest."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def serve(
    settings: Settings,
    *,
    concurrency: int,
    worker_id: str | None,
    render_status: RenderStatus | None = None,
) -> None:
    """Run a pool until SIGTERM/SIGINT."""
    tracing.configure(settings, "atlas-jobs-worker")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    pool = WorkerPool(
        settings,
        database_url=resolve_database_url(settings),
        concurrency=concurrency,
        worker_id=worker_id,
        render_status=render_status,
    )
    try:
        await pool.run(stop)
    finally:
        tracing.flush()
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signum)


def run_worker(
    settings: Settings,
    *,
    concurrency: int,
    worker_id: str | None,
    render_status: RenderStatus | None = None,
) -> None:
    """Blocking entry point used by ``atlas-jobs worker`` and ``atlas-jobs serve``;
    ``render_status`` (the API's status representation) turns the webhook sender on."""
    asyncio.run(
        serve(settings, concurrency=concurrency, worker_id=worker_id, render_status=render_status)
    )
