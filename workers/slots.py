"""The pool's job slots and its local queue: which claimed attempts run, which wait.

A claimed attempt is either *running* (a task of its own, holding a slot until its work
is done) or *waiting* in the local queue (claimed ahead of a free slot, graphile-worker's
``localQueue``). Both are held attempts: the heartbeat extends their leases
(:meth:`Slots.held`), a lost lease stops them (:meth:`Slots.lose`).

While claims come back full (:attr:`Slots.busy`: the queue has a backlog) the pool
claims up to ``prefetch`` jobs beyond its free slots; a claim that comes back short turns
that off until a claim fills again (:meth:`Slots.room`).

A job whose work is done frees its slot while its publication commits
(:meth:`Slots.publishing`). Publications in flight are bounded separately: those in a
transaction of their own (a connection each) to one extra slot set, those waiting in the
completer's group commit (one statement for all) to the completer's batch.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from atlas_jobs._app.logs import get_logger
from atlas_jobs._workers.context import JobContext
from atlas_jobs._workers.wakeup import Flag

log = get_logger("atlas.worker.pool")


class Slots:
    """``concurrency`` job slots, the local queue in front of them, and the accounting
    of the publications in flight."""

    def __init__(
        self,
        *,
        concurrency: int,
        prefetch: int,
        max_grouped: int,
        execute: Callable[[JobContext], Awaitable[None]],
    ) -> None:
        self.concurrency = concurrency
        self.prefetch = prefetch
        """Most claimed jobs held beyond the running slots while claims come back full."""
        self.max_grouped = max_grouped
        """Most publications waiting in the completer's group commit (its batch)."""
        self.execute = execute
        """Runs one attempt to its end (never raises)."""
        self.running: dict[uuid.UUID, tuple[JobContext, asyncio.Task[Any]]] = {}
        self.local: dict[uuid.UUID, JobContext] = {}
        """Claimed, not started yet (claim order): the local queue."""
        self.busy = False
        """The last claim came back full: prefetching is on."""
        self.stopping = False
        """Draining: nothing more starts from the local queue."""
        self.working = 0
        """Started jobs whose work is not done yet (they hold a slot)."""
        self.solo = 0
        """Publications in a transaction of their own (each holds a connection)."""
        self.grouped = 0
        """Publications waiting in the completer's group commit."""
        self.freed = Flag()
        """A slot (or a local queue place) was freed."""

    # -- what the claimer asks ----------------------------------------------------------

    def occupied(self) -> bool:
        """Some attempt is held: running, or waiting in the local queue."""
        return bool(self.running or self.local)

    def free(self) -> int:
        """Slots free for a job now, within the bounds on publications in flight."""
        return min(
            self.concurrency - self.working,
            2 * self.concurrency - self.working - self.solo,
            self.max_grouped - self.grouped,
        )

    def room(self) -> int:
        """How many jobs the next claim may take: the free slots not already promised
        to a locally queued job, plus the prefetch allowance while the queue is busy.

        Not busy, a claim for free slots asks for ONE job more: only a claim that comes
        back with more jobs than the free slots proves a backlog. (A claim that merely
        filled the free slots proves nothing: one job for one free slot would turn
        prefetching on, and the next claim -- sent at once -- would find the queue empty:
        one wasted statement per job when jobs arrive one at a time.)"""
        free = self.free()
        probe = 1 if self.prefetch and free > 0 else 0
        ahead = self.prefetch if self.busy else probe
        return free + ahead - len(self.local)

    def add(self, claimed: Iterable[JobContext]) -> None:
        """Queue freshly claimed attempts locally, then start what the slots allow."""
        for ctx in claimed:
            self.local[ctx.job_id] = ctx
        self.dispatch()

    # -- callbacks of the heartbeat and the runner ------------------------------------

    def held(self) -> dict[uuid.UUID, JobContext]:
        """Every attempt this process holds: running and waiting in the local queue."""
        held = {job_id: ctx for job_id, (ctx, _) in self.running.items()}
        held.update(self.local)
        return held

    def lose(self, ctx: JobContext) -> None:
        """The heartbeat found the lease gone: stop the job task (or drop the job from
        the local queue); it writes nothing more."""
        ctx.mark_lost()
        if self.local.get(ctx.job_id) is ctx:
            del self.local[ctx.job_id]
            self.freed.set()
            return
        entry = self.running.get(ctx.job_id)
        if entry is not None and entry[0] is ctx:
            entry[1].cancel()

    def start_canceled(self) -> None:
        """After a beat: a locally queued job whose cancel request it saw starts now,
        beyond the slots -- it ends ``canceled`` at its first safe point, before any
        work, instead of waiting for a slot."""
        for ctx in [ctx for ctx in self.local.values() if ctx.cancel_requested]:
            del self.local[ctx.job_id]
            self._begin(ctx)

    def publishing(self, ctx: JobContext) -> None:
        """The job's work is done; only its publication is in flight. Its slot is free
        for the next job, so claiming overlaps the commit of finished jobs."""
        self.working -= 1
        if ctx.group_commit:
            self.grouped += 1
        else:
            self.solo += 1
        self.dispatch()
        self.freed.set()

    # -- starting and ending attempts -------------------------------------------------

    def dispatch(self) -> None:
        """Start locally queued jobs, oldest claim first, while slots are free."""
        if self.stopping:
            return
        free = self.free()
        while self.local and free > 0:
            job_id = next(iter(self.local))
            self._begin(self.local.pop(job_id))
            free -= 1

    def _begin(self, ctx: JobContext) -> None:
        self.working += 1
        task = asyncio.create_task(self._run(ctx))
        self.running[ctx.job_id] = (ctx, task)

    async def _run(self, ctx: JobContext) -> None:
        try:
            await self.execute(ctx)
        finally:
            entry = self.running.get(ctx.job_id)
            if entry is not None and entry[0] is ctx:
                del self.running[ctx.job_id]
            if not ctx.publishing:
                self.working -= 1
            elif ctx.group_commit:
                self.grouped -= 1
            else:
                self.solo -= 1
            self.dispatch()
            self.freed.set()

    async def drain(self, grace_seconds: float) -> None:
        """Shutdown: release the locally queued jobs, stop running ones at safe points
        and release them; interrupt what the grace cannot."""
        self.stopping = True
        # A job that never started passes its first safe point at once and is released
        # by the runner (back to queued, history row, attempt not charged).
        waiting, self.local = list(self.local.values()), {}
        for ctx in waiting:
            ctx.draining = True
            self._begin(ctx)
        if not self.running:
            return
        log.info("worker.draining", jobs=len(self.running))
        for ctx, _ in self.running.values():
            ctx.draining = True
        tasks = [task for _, task in self.running.values()]
        _, pending = await asyncio.wait(tasks, timeout=grace_seconds)
        for ctx, task in list(self.running.values()):
            if task in pending and not ctx.publishing:
                task.cancel()  # JobRunner releases it (shielded write)
        if pending:
            await asyncio.wait(pending)
