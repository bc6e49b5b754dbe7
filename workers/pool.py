"""The worker process: claims jobs, runs them, heartbeats, reaps, sweeps, drains.

Main loop: while there is room, claim up to ``claim_batch`` jobs in one short statement
(:meth:`atlas_jobs._app.transitions.Transitions.claim`) into the process's local queue, start a task
per job as slots free up, and when the queue has nothing for us, sleep until
``atlas_work`` is notified or the poll interval passes. No work ever happens inside the
claim transaction.

Every idle process LISTENs, so every notification wakes them all and one wins the job.
A process whose claims after notifications came back EMPTY twice in a row (other
processes won) cools down for ``ATLAS_CLAIM_COOLDOWN_SECONDS``
(:class:`atlas_jobs._workers.wakeup.ClaimCooldown`): notifications in that window are coalesced into
one claim at its end. A process that wins keeps claiming at once, so a lone idle
process (or the fleet's winners) picks up a job on its notification with no delay,
while the losers send at most one claim per window instead of one per job: N idle
processes no longer send N claims per job.

The local queue (graphile-worker's ``localQueue``): while claims come back full (the
queue is busy) a process claims up to ``prefetch`` jobs more than its free slots
(``ATLAS_WORKER_PREFETCH``, default: its concurrency), so claiming is decoupled from the
slot count and the next batch is already claimed while the current one runs. A job
waiting there is a held attempt like a running one:

* the heartbeat extends its lease (it is part of :meth:`WorkerPool._held`);
* a lost lease drops it (it is never started);
* a cancel request the heartbeat sees starts it at once: it passes the safe point every
  attempt passes before its handler (:meth:`atlas_jobs._workers.runner.JobRunner.run`) and ends
  ``canceled`` without running any work;
* on shutdown it is released like a running job stopped at a safe point: back to
  ``queued`` with its history row, the attempt not charged.

A claim that comes back short (the queue is not busy) turns prefetching off until a
claim fills again -- not busy, a claim asks for one job more than the free slots, and
only that job's presence turns prefetching on -- so an idle fleet's pickup latency and
its spread of jobs between
processes stay as they were: a process takes jobs ahead of its slots only from a
backlog, and at most ``prefetch`` of them. While prefetching it claims again once half a
batch is free (fewer, larger claims; the local queue feeds the slots meanwhile).

A job whose work is done frees its slot while its publication commits. Publications in
flight are bounded separately: those in a transaction of their own (a connection each)
to one extra slot set, those waiting in the completer's group commit (one statement for
all) to the completer's batch -- so a group commit takes as many jobs as the claims fed.

Beside it run one heartbeat loop for every held attempt, a reaper, a sweeper and a
scheduler (every process runs them; ``SKIP LOCKED`` and the tick rows make that safe)
and the LISTEN connection. The process's row of the worker registry
(:mod:`atlas_jobs._workers.registration`: the ``kind@version`` keys it serves) is written
before the first claim and every ``ATLAS_WORKER_HEARTBEAT_SECONDS``, on the heartbeat
connection; it is deleted as soon as claiming stops on a clean shutdown.

SIGTERM/SIGINT: stop claiming; jobs waiting in the local queue are released at once;
every running job stops at its next safe point and is released (back to ``queued``,
attempt not charged) -- a job already publishing finishes.
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

from sqlalchemy import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from atlas_jobs._app import metrics, tracing
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import reads
from atlas_jobs._app.db.engine import (
    WORKER_SESSION_SETTINGS,
    create_engine,
    libpq_url,
    pool_usage,
    resolve_database_url,
    single_statements,
)
from atlas_jobs._app.heap import freeze_startup_heap
from atlas_jobs._app.lifecycle import ActorKind, AttemptOutcome
from atlas_jobs._app.logs import get_logger
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.storage import make_store
from atlas_jobs._app.transitions import Actor, Transitions
from atlas_jobs._workers import eventloop
from atlas_jobs._workers.completer import Completer
from atlas_jobs._workers.context import ClaimedJob, JobContext
from atlas_jobs._workers.handlers import Handler, registry
from atlas_jobs._workers.heartbeat import Heartbeat
from atlas_jobs._workers.listener import WorkListener
from atlas_jobs._workers.pruner import Pruner
from atlas_jobs._workers.reaper import Reaper
from atlas_jobs._workers.registration import Registration, stop_beating
from atlas_jobs._workers.reindexer import MIB, Reindexer
from atlas_jobs._workers.runner import JobRunner
from atlas_jobs._workers.scheduler import Scheduler
from atlas_jobs._workers.sweeper import Sweeper
from atlas_jobs._workers.vacuumer import Vacuumer
from atlas_jobs._workers.wakeup import ClaimCooldown, Flag, wait_any
from atlas_jobs._workers.webhook_sender import RenderStatus, WebhookSender

log = get_logger("atlas.worker.pool")

POOL_SAMPLE_SECONDS = 5.0
MAX_CLAIM = 100
"""Most jobs one claim statement takes (short row locks, a bounded statement)."""


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
        prefetch: int | None = None,
        handlers: dict[str, Handler] | None = None,
        clock: Clock | None = None,
        render_status: RenderStatus | None = None,
    ) -> None:
        self.settings = settings
        self.database_url = database_url
        self.concurrency = concurrency
        if prefetch is None:
            prefetch = settings.worker_prefetch
        self.prefetch = concurrency if prefetch is None else prefetch
        """Most claimed jobs held beyond the running slots while claims come back full."""
        self.claim_batch = claim_batch or min(concurrency + self.prefetch, MAX_CLAIM)
        self._min_claim = max(1, min(concurrency, self.claim_batch) // 4)
        # While prefetching, the local queue keeps the slots fed during a claim: wait
        # until half a batch is free (fewer, larger claims) instead of claiming per slot.
        self._min_claim_busy = (
            max(self._min_claim, self.claim_batch // 2) if self.prefetch else self._min_claim
        )
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
        self.actor = Actor(ActorKind.WORKER, self.worker_id)
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
        self.heartbeat = Heartbeat(
            self.heartbeat_engine,
            self.transitions,
            self._held,
            self._lose,
            on_beat=self._start_canceled,
        )
        # The worker registry's row (what GET /v1/kinds counts and waiting_for reads):
        # on the heartbeat connection too, so a busy pool never makes it look dead.
        self.registration = Registration(
            self.heartbeat_engine,
            self.transitions.clock,
            worker_id=self.worker_id,
            serves=self.handlers,
            concurrency=concurrency,
        )
        self._registering: asyncio.Task[None] | None = None
        self.reaper = Reaper(self.engine, self.transitions)
        self.pruner = Pruner(
            self.statements,  # one statement per batch: no BEGIN/COMMIT round trips
            self.transitions.clock,
            keep_seconds=settings.result_ttl_seconds + settings.finished_job_retention_seconds,
            batch_size=settings.prune_batch_size,
        )
        self.sweeper = Sweeper(
            self.engine,
            self.transitions,
            self.store,
            pruner=self.pruner,
            forget_workers_seconds=settings.worker_forget_seconds,
            reindexer=(
                Reindexer(
                    self.engine,
                    min_bytes=settings.index_rebuild_min_mb * MIB,
                    bytes_per_row=settings.index_rebuild_bytes_per_row,
                    check_seconds=settings.index_rebuild_check_seconds,
                )
                if settings.index_rebuild_min_mb > 0
                else "off"
            ),
            vacuumer=(
                Vacuumer(
                    self.engine,
                    dead_rows=settings.vacuum_dead_rows,
                    check_seconds=settings.vacuum_check_seconds,
                )
                if settings.vacuum_dead_rows > 0
                else None
            ),
        )
        self.scheduler = Scheduler(
            self.engine,
            self.transitions,
            admission_cap=settings.admission_max_active_per_owner,
        )
        self.webhooks = (
            WebhookSender(self.engine, self.transitions.clock, settings, render_status)
            if render_status is not None
            else None
        )
        self._running: dict[uuid.UUID, tuple[JobContext, asyncio.Task[Any]]] = {}
        self._local: dict[uuid.UUID, JobContext] = {}
        """Claimed, not started yet (claim order): the local queue."""
        self._busy = False
        """The last claim came back full: prefetching is on."""
        self._stopping = False
        self._working = 0
        """Started jobs whose work is not done yet (they hold a slot)."""
        self._solo = 0
        """Publications in a transaction of their own (each holds a connection)."""
        self._grouped = 0
        """Publications waiting in the completer's group commit."""
        # What the claim loop sleeps on: one future for all of them, no task per wait.
        self._wake = Flag()
        """New work was announced (or the LISTEN connection came back)."""
        self._slot_freed = Flag()
        self._claimer: AsyncConnection | None = None
        """The claims' connection, kept between claims (:meth:`_claim`)."""
        self._stopped = Flag()
        """``stop`` was set (mirrored by :meth:`_watch_stop`)."""
        self._cooldown = ClaimCooldown(settings.claim_cooldown_seconds)
        """After notified claims found nothing: coalesce the next notifications."""
        self._rescan = False
        """The wake-up is the LISTEN connection's (re)connect, not a notification."""

    # -- callbacks ----------------------------------------------------------------------

    def _held(self) -> dict[uuid.UUID, JobContext]:
        """Every attempt this process holds: running and waiting in the local queue."""
        held = {job_id: ctx for job_id, (ctx, _) in self._running.items()}
        held.update(self._local)
        return held

    def _lose(self, ctx: JobContext) -> None:
        """The heartbeat found the lease gone: stop the job task (or drop the job from
        the local queue); it writes nothing more."""
        ctx.mark_lost()
        if self._local.get(ctx.job_id) is ctx:
            del self._local[ctx.job_id]
            self._slot_freed.set()
            return
        entry = self._running.get(ctx.job_id)
        if entry is not None and entry[0] is ctx:
            entry[1].cancel()

    def _start_canceled(self) -> None:
        """After a beat: a locally queued job whose cancel request it saw starts now,
        beyond the slots -- it ends ``canceled`` at its first safe point, before any
        work, instead of waiting for a slot."""
        for ctx in [ctx for ctx in self._local.values() if ctx.cancel_requested]:
            del self._local[ctx.job_id]
            self._begin(ctx)

    def _publishing(self, ctx: JobContext) -> None:
        """The job's work is done; only its publication is in flight. Its slot is free
        for the next job, so claiming overlaps the commit of finished jobs."""
        self._working -= 1
        if ctx.group_commit:
            self._grouped += 1
        else:
            self._solo += 1
        self._dispatch()
        self._slot_freed.set()

    def _free_slots(self) -> int:
        # Publications in flight are bounded too: those in a transaction of their own
        # (a connection each) to one extra slot set, those in the group commit (one
        # statement for all) to the completer's batch.
        return min(
            self.concurrency - self._working,
            2 * self.concurrency - self._working - self._solo,
            self.completer.max_batch - self._grouped,
        )

    def _claim_room(self) -> int:
        """How many jobs the next claim may take: the free slots not already promised
        to a locally queued job, plus the prefetch allowance while the queue is busy.

        Not busy, a claim for free slots asks for ONE job more: only a claim that comes
        back with more jobs than the free slots proves a backlog. (A claim that merely
        filled the free slots proves nothing: one job for one free slot would turn
        prefetching on, and the next claim -- sent at once -- would find the queue empty:
        one wasted statement per job when jobs arrive one at a time.)"""
        free = self._free_slots()
        probe = 1 if self.prefetch and free > 0 else 0
        ahead = self.prefetch if self._busy else probe
        return free + ahead - len(self._local)

    def _dispatch(self) -> None:
        """Start locally queued jobs, oldest claim first, while slots are free."""
        if self._stopping:
            return
        free = self._free_slots()
        while self._local and free > 0:
            job_id = next(iter(self._local))
            self._begin(self._local.pop(job_id))
            free -= 1

    async def sample_pool(self) -> None:
        """Pool gauges (``atlas_db_pool_*{pool="worker"}``; summed over live worker
        processes under ``serve``)."""
        in_use, waiting = pool_usage(self.engine)
        metrics.DB_POOL_IN_USE.labels("worker").set(in_use)
        metrics.DB_POOL_WAITING.labels("worker").set(waiting)

    def wake(self) -> None:
        """New work was announced."""
        self._wake.set()

    def _listening(self) -> None:
        """The LISTEN connection is (back) up: claim, since jobs queued meanwhile were
        announced to nobody -- a claim no notification asked for, so one that finds
        nothing lost no race (:class:`atlas_jobs._workers.wakeup.ClaimCooldown`)."""
        self._rescan = True
        self._wake.set()

    # -- the main loop ------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        log.info(
            "worker.started",
            worker_id=self.worker_id,
            concurrency=self.concurrency,
            event_loop=eventloop.running_loop_name(),
        )
        freeze_startup_heap()  # the full collections walk only what jobs allocate
        kinds = {key.split("@", 1)[0] for key in self.handlers}
        listener = WorkListener(
            libpq_url(self.database_url), kinds=kinds, wake=self.wake, on_connected=self._listening
        )
        background = [
            asyncio.create_task(self._watch_stop(stop), name="stop-watch"),
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
        await self._register()
        try:
            await self._claim_loop(stop)
            await self._withdraw()  # claiming has stopped: it serves nothing new
            await self._drain()
        finally:
            await self._withdraw()
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await self.engine.dispose()
            await self.heartbeat_engine.dispose()
            log.info("worker.stopped", worker_id=self.worker_id)

    async def _register(self) -> None:
        """The registry row now (before the first claim), then a beat every
        ``ATLAS_WORKER_HEARTBEAT_SECONDS``. A failed first write is retried by the beats."""
        try:
            await self.registration.run_once()
        except Exception as exc:
            log.warning("registration.failed", error_class=type(exc).__name__)
        self._registering = asyncio.create_task(
            self._every(self.settings.worker_heartbeat_seconds, self.registration.run_once),
            name="registration",
        )

    async def _withdraw(self) -> None:
        """Stop beating and delete the registry row (once; never raises)."""
        task, self._registering = self._registering, None
        if task is None:
            return
        await stop_beating(task)
        await self.registration.withdraw()

    async def _claim_loop(self, stop: asyncio.Event) -> None:
        keys = sorted(self.handlers)
        try:
            while not stop.is_set():
                room = self._claim_room()
                least = self._min_claim_busy if self._busy else self._min_claim
                if room <= 0 or ((self._running or self._local) and room < least):
                    # Wait for a worthwhile batch rather than claiming jobs one by one
                    # while others are finishing (they free their slots within moments).
                    self._slot_freed.clear()
                    await wait_any(self._stopped, self._slot_freed)
                    continue
                want = min(room, self.claim_batch)
                woken = self._wake.is_set() and not self._rescan
                self._wake.clear()  # before claiming: a notify during the claim is kept
                self._rescan = False
                try:
                    rows = await self._claim(keys, want)
                except Exception as exc:  # database unreachable: back off, keep going
                    log.warning("claim.failed", error_class=type(exc).__name__)
                    await wait_any(self._stopped, seconds=self.settings.poll_interval_seconds)
                    continue
                self._cooldown.claimed(woken=woken, found=len(rows))
                # Prefetch only while the queue is busy: a short claim means there is no
                # backlog for this process to take ahead of the others.
                self._busy = len(rows) == want
                for row in rows:
                    ctx = self.runner.context(ClaimedJob.from_claim(row))
                    self._local[ctx.job_id] = ctx
                self._dispatch()
                if len(rows) < want:
                    await wait_any(
                        self._stopped, self._wake, seconds=self.settings.poll_interval_seconds
                    )
                    if self._wake.is_set():
                        await self._cooldown.wait(self._stopped)
        finally:
            await self._close_claimer()

    async def _claim(self, keys: list[str], want: int) -> list[Row[Any]]:
        """One claim statement on the claims' own connection.

        It stays checked out between claims: no checkout and check-in per claim, on the
        pickup path of every job that arrives at an idle worker (docs/performance.md,
        "Figures behind the code"). A failed claim closes it (the pool discards a broken
        one); the next claim takes another."""
        if self._claimer is None:
            self._claimer = await self.statements.connect()
        try:
            return await self.transitions.claim(
                self._claimer, worker_id=self.worker_id, handlers=keys, limit=want, full_rows=False
            )
        except Exception:
            await self._close_claimer()
            raise

    async def _close_claimer(self) -> None:
        """Hand the claims' connection back to the pool; never raises."""
        claimer, self._claimer = self._claimer, None
        if claimer is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(claimer.close())

    async def _watch_stop(self, stop: asyncio.Event) -> None:
        """Mirror ``stop`` into the flag the claim loop sleeps on."""
        await stop.wait()
        self._stopped.set()

    def _begin(self, ctx: JobContext) -> None:
        self._working += 1
        task = asyncio.create_task(self._run_job(ctx))
        self._running[ctx.job_id] = (ctx, task)

    async def _run_job(self, ctx: JobContext) -> None:
        try:
            if tracing.enabled():
                outcome = await self._run_traced(ctx)
            else:  # no span to open, no creation trace to read
                outcome = await self.runner.run(ctx)
            metrics.record_attempt(ctx.job.kind, outcome.value)
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # an ending could not be written: the reaper recovers it
            log.error("job.ending_failed", job_id=str(ctx.job_id), error_class=type(exc).__name__)
        finally:
            entry = self._running.get(ctx.job_id)
            if entry is not None and entry[0] is ctx:
                del self._running[ctx.job_id]
            if not ctx.publishing:
                self._working -= 1
            elif ctx.group_commit:
                self._grouped -= 1
            else:
                self._solo -= 1
            self._dispatch()
            self._slot_freed.set()

    async def _run_traced(self, ctx: JobContext) -> AttemptOutcome:
        """The attempt in a span parented to its job's creation request."""
        with tracing.attempt_span(
            await self._traceparent(ctx),
            job_id=str(ctx.job_id),
            attempt_id=str(ctx.attempt_id),
            kind=ctx.job.kind,
            attempt=ctx.job.attempt,
        ):
            return await self.runner.run(ctx)

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
        """Shutdown: release the locally queued jobs, stop running ones at safe points
        and release them; interrupt what the grace cannot."""
        self._stopping = True
        # A job that never started passes its first safe point at once and is released
        # by the runner (back to queued, history row, attempt not charged).
        waiting, self._local = list(self._local.values()), {}
        for ctx in waiting:
            ctx.draining = True
            self._begin(ctx)
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
    """Blocking entry point used by ``atlas-jobs worker`` and ``atlas-jobs serve``, on
    the worker's event loop (:mod:`atlas_jobs._workers.eventloop`: uvloop); ``render_status`` (the
    API's status representation) turns the webhook sender on."""
    eventloop.run(
        serve(settings, concurrency=concurrency, worker_id=worker_id, render_status=render_status)
    )
