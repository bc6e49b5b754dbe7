"""The worker process: a pool composed of parts that claim jobs, run them, heartbeat,
maintain and drain.

============================  ==========================================================
part                          what it does
============================  ==========================================================
:class:`~.claimer.Claimer`    the claim loop on its own connection: claims while the
                              slots have room, sleeps on ``atlas_work`` notifications or
                              the poll interval, cools down after lost races
:class:`~.slots.Slots`        the job slots and the local queue in front of them
                              (prefetch while claims come back full), the accounting of
                              publications in flight, the drain
:class:`~.runner.JobRunner`   the executor: runs one attempt to exactly one fenced ending
:class:`~.completer.Completer`  the group commit of file-less publications
:class:`~.heartbeat.Heartbeat`  extends the leases of every held attempt (running and
                              locally queued) on a connection of its own; sees cancels
:class:`~.registration.Registration`  the process's row of the worker registry
:mod:`~.maintenance`          the flat list of services (reaper, sweeper, scheduler,
                              webhook sender, pool gauges), each run on its interval
============================  ==========================================================

The local queue (graphile-worker's ``localQueue``): while claims come back full (the
queue is busy) a process claims up to ``prefetch`` jobs more than its free slots
(``ATLAS_WORKER_PREFETCH``, default: its concurrency), so claiming is decoupled from the
slot count and the next batch is already claimed while the current one runs. A job
waiting there is a held attempt like a running one:

* the heartbeat extends its lease (it is part of :meth:`Slots.held`);
* a lost lease drops it (it is never started);
* a cancel request the heartbeat sees starts it at once: it passes the safe point every
  attempt passes before its handler (:meth:`atlas_jobs._workers.runner.JobRunner.run`) and ends
  ``canceled`` without running any work;
* on shutdown it is released like a running job stopped at a safe point: back to
  ``queued`` with its history row, the attempt not charged.

A claim that comes back short (the queue is not busy) turns prefetching off until a
claim fills again -- not busy, a claim asks for one job more than the free slots, and
only that job's presence turns prefetching on -- so an idle fleet's pickup latency and
its spread of jobs between processes stay as they were: a process takes jobs ahead of
its slots only from a backlog, and at most ``prefetch`` of them. While prefetching it
claims again once half a batch is free (fewer, larger claims; the local queue feeds the
slots meanwhile).

The process's row of the worker registry (:mod:`atlas_jobs._workers.registration`: the
``kind@version`` keys it serves) is written before the first claim and every
``ATLAS_WORKER_HEARTBEAT_SECONDS``, on the heartbeat connection; it is deleted as soon as
claiming stops on a clean shutdown.

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

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app import tracing
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.engine import (
    WORKER_SESSION_SETTINGS,
    create_engine,
    libpq_url,
    resolve_database_url,
    single_statements,
)
from atlas_jobs._app.heap import freeze_startup_heap
from atlas_jobs._app.lifecycle import ActorKind
from atlas_jobs._app.logs import get_logger
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.storage import make_store
from atlas_jobs._app.transitions import Actor, Transitions
from atlas_jobs._workers import eventloop, maintenance
from atlas_jobs._workers.claimer import MAX_CLAIM, Claimer
from atlas_jobs._workers.completer import Completer
from atlas_jobs._workers.handlers import Handler, registry
from atlas_jobs._workers.heartbeat import Heartbeat
from atlas_jobs._workers.listener import WorkListener
from atlas_jobs._workers.registration import Registration, stop_beating
from atlas_jobs._workers.runner import JobRunner
from atlas_jobs._workers.slots import Slots
from atlas_jobs._workers.webhook_sender import RenderStatus

__all__ = ["MAX_CLAIM", "WorkerPool", "default_worker_id", "run_worker", "serve"]

log = get_logger("atlas.worker.pool")


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
            engine=self.engine,
            transitions=self.transitions,
            store=self.store,
            settings=settings,
            handlers=self.handlers,
            actor=self.actor,
        )
        self.slots = Slots(
            concurrency=concurrency,
            prefetch=concurrency if prefetch is None else prefetch,
            max_grouped=self.completer.max_batch,
            execute=self.runner.execute,
        )
        self.runner.on_publishing = self.slots.publishing
        self.claimer = Claimer(
            self.statements,
            self.transitions,
            self.slots,
            worker_id=self.worker_id,
            handlers=self.handlers,
            claim_batch=claim_batch,
            cooldown_seconds=settings.claim_cooldown_seconds,
            poll_interval_seconds=settings.poll_interval_seconds,
            context=self.runner.context,
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
            self.slots.held,
            self.slots.lose,
            on_beat=self.slots.start_canceled,
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
        self.maintenance = maintenance.build(
            settings,
            worker_id=self.worker_id,
            engine=self.engine,
            statements=self.statements,
            transitions=self.transitions,
            store=self.store,
            render_status=render_status,
        )

    def wake(self) -> None:
        """New work was announced."""
        self.claimer.wake()

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
            libpq_url(self.database_url),
            kinds=kinds,
            wake=self.claimer.wake,
            on_connected=self.claimer.listening,
        )
        background = [
            asyncio.create_task(self._watch_stop(stop), name="stop-watch"),
            asyncio.create_task(listener.run(), name="listener"),
            asyncio.create_task(self.heartbeat.run(), name="heartbeat"),
            asyncio.create_task(self.completer.run(), name="completer"),
            *maintenance.start(self.maintenance.services),
        ]
        await self._register()
        try:
            await self.claimer.run(stop)
            await self._withdraw()  # claiming has stopped: it serves nothing new
            await self.slots.drain(self.settings.shutdown_grace_seconds)
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
            maintenance.run_every(
                maintenance.Every(
                    "registration", self.settings.worker_heartbeat_seconds, self.registration
                )
            ),
            name="registration",
        )

    async def _withdraw(self) -> None:
        """Stop beating and delete the registry row (once; never raises)."""
        task, self._registering = self._registering, None
        if task is None:
            return
        await stop_beating(task)
        await self.registration.withdraw()

    async def _watch_stop(self, stop: asyncio.Event) -> None:
        """Mirror ``stop`` into the flag the claim loop sleeps on."""
        await stop.wait()
        self.claimer.stopped.set()


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
