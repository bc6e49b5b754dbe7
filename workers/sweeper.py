"""The sweeper: result retention and private-output cleanup.

* Published results whose retention (``ATLAS_RESULT_TTL_SECONDS``) passed: delivery
  becomes ``expired`` (the execution state stays ``succeeded``), then the files are
  removed. Marking first means no reader is ever handed a reference to removed files;
  a crash in between leaves unreachable files that a later pass cannot see -- a leak,
  never a broken link.
* Waiting jobs whose deadline passed get their rule applied: ``fail`` or ``escalate``
  (to ``unresolved``, for an operator).
* Queued jobs never claimed by their start deadline (``start_by``) end ``failed``,
  reason ``start_deadline_passed`` (``miss_start``). No claim could take them after the
  deadline anyway (the claim's own predicate): this pass only makes the ending visible,
  recorded and notified.
* Private staging areas of finished jobs (``blocked`` outputs of failed or canceled
  jobs, leftovers of a stale attempt) are removed. The staging directory listing is
  bounded by the jobs in progress, so no extra bookkeeping column is needed.
* Then finished jobs past their retention are pruned (:mod:`atlas_jobs._workers.pruner`), so the
  tables hold live work and recent history, not every job ever run.
* Then, at most every few seconds, a hot table holding many dead row versions is
  vacuumed without waiting for autovacuum's next visit (:mod:`atlas_jobs._workers.vacuumer`; one
  worker process at a time).
* Then the worker registry's rows of processes dead for ``ATLAS_WORKER_FORGET_SECONDS``
  (killed, their machine gone: no clean shutdown deleted them) are deleted.
* Last, at most every few minutes, an index of ``jobs`` that outgrew the table's rows
  (a drained backlog leaves B-trees at their peak size) is rebuilt concurrently
  (:mod:`atlas_jobs._workers.reindexer`; one worker process at a time).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db import reads, workers
from atlas_jobs._app.db.queries import EXPIRED_RESULTS, EXPIRED_WAITS, MISSED_STARTS
from atlas_jobs._app.lifecycle import TERMINAL_STATES, DeliveryState
from atlas_jobs._app.logs import get_logger
from atlas_jobs._app.storage import ResultStore
from atlas_jobs._app.transitions import Applied, Transitions
from atlas_jobs._workers.pruner import Pruner
from atlas_jobs._workers.reindexer import Reindexer
from atlas_jobs._workers.vacuumer import Vacuumer

log = get_logger("atlas.worker.sweeper")


@dataclass(frozen=True, slots=True)
class SweepReport:
    expired: int
    cleaned: int
    deadlines: int = 0
    pruned: int = 0
    reindexed: int = 0
    vacuumed: int = 0
    forgotten_workers: int = 0
    missed_starts: int = 0


class Sweeper:
    def __init__(
        self,
        engine: AsyncEngine,
        transitions: Transitions,
        store: ResultStore,
        *,
        batch_size: int = 500,
        pruner: Pruner | None = None,
        reindexer: Reindexer | None = None,
        vacuumer: Vacuumer | None = None,
        forget_workers_seconds: float | None = None,
    ) -> None:
        self.engine = engine
        self.transitions = transitions
        self.store = store
        self.batch_size = batch_size
        self.pruner = pruner
        """None: finished jobs are kept (a sweeper built bare)."""
        self.reindexer = reindexer
        """None: no rebuilds (ATLAS_INDEX_REBUILD_MIN_MB=0, or a sweeper built bare)."""
        self.vacuumer = vacuumer
        """None: autovacuum alone (ATLAS_VACUUM_DEAD_ROWS=0, or a sweeper built bare)."""
        self.forget_workers_seconds = forget_workers_seconds
        """None: the worker registry is left alone (a sweeper built bare)."""

    async def run_once(self) -> SweepReport:
        expired = 0
        while True:
            moved, seen = await self._expire_batch()
            expired += moved
            if seen < self.batch_size:
                break
        deadlines = 0
        while True:
            passed, seen = await self._deadline_batch()
            deadlines += passed
            if seen < self.batch_size:
                break
        missed = 0
        while True:
            ended, seen = await self._missed_start_batch()
            missed += ended
            if seen < self.batch_size:
                break
        await self._remove_unreferenced_published()  # a crash after expiry
        cleaned = await self._clean_staging()
        pruned = (await self.pruner.run_once()).pruned if self.pruner else 0
        forgotten = await self._forget_dead_workers()
        vacuumed = len(await self.vacuumer.run_if_due()) if self.vacuumer else 0
        reindexed = len(await self.reindexer.run_if_due()) if self.reindexer else 0
        return SweepReport(
            expired=expired,
            cleaned=cleaned,
            deadlines=deadlines,
            pruned=pruned,
            reindexed=reindexed,
            vacuumed=vacuumed,
            forgotten_workers=forgotten,
            missed_starts=missed,
        )

    async def _forget_dead_workers(self) -> int:
        """One statement over the registry's few rows."""
        if self.forget_workers_seconds is None:
            return 0
        async with self.engine.begin() as conn:
            forgotten = await workers.forget_dead(
                conn, self.transitions.clock, after_seconds=self.forget_workers_seconds
            )
        if forgotten:
            log.info("workers.forgotten", workers=forgotten)
        return forgotten

    async def _deadline_batch(self) -> tuple[int, int]:
        t = self.transitions
        async with self.engine.begin() as conn:
            rows = (
                await conn.execute(EXPIRED_WAITS, {"limit": self.batch_size, **t.clock.bind()})
            ).all()
            results = await t.pass_deadlines(conn, [row.id for row in rows])
        passed = 0
        for row, outcome in zip(rows, results, strict=True):
            if isinstance(outcome, Applied):
                passed += 1
                log.info("wait.deadline_passed", job_id=str(row.id), to=outcome.to_state)
        return passed, len(rows)

    async def _missed_start_batch(self) -> tuple[int, int]:
        t = self.transitions
        async with self.engine.begin() as conn:
            rows = (
                await conn.execute(MISSED_STARTS, {"limit": self.batch_size, **t.clock.bind()})
            ).all()
            results = await t.miss_starts(conn, [row.id for row in rows])
        ended = sum(1 for outcome in results if isinstance(outcome, Applied))
        for row, outcome in zip(rows, results, strict=True):
            if isinstance(outcome, Applied):
                log.info("job.start_deadline_passed", job_id=str(row.id))
        return ended, len(rows)

    async def _expire_batch(self) -> tuple[int, int]:
        t = self.transitions
        async with self.engine.begin() as conn:
            rows = (
                await conn.execute(EXPIRED_RESULTS, {"limit": self.batch_size, **t.clock.bind()})
            ).all()
            results = await t.expire_results(conn, [row.id for row in rows], full_rows=False)
        done = [
            (row.owner, row.id)
            for row, outcome in zip(rows, results, strict=True)
            if isinstance(outcome, Applied)
        ]
        if done:  # one thread hop per batch, not per job: expiry keeps up with churn
            await asyncio.to_thread(self._remove_published_many, done)
        for _, job_id in done:
            log.info("result.expired", job_id=str(job_id))
        return len(done), len(rows)

    def _remove_published_many(self, done: list[tuple[str, uuid.UUID]]) -> None:
        for owner, job_id in done:
            self.store.remove_published(owner, job_id)

    async def _clean_staging(self) -> int:
        staged = await asyncio.to_thread(self.store.staged_job_ids)
        if not staged:
            return 0
        async with self.engine.connect() as conn:
            states = await reads.job_states(conn, staged)
        terminal = {s.value for s in TERMINAL_STATES}
        finished = [j for j in staged if j not in states or states[j][0] in terminal]
        for job_id in finished:
            await asyncio.to_thread(self.store.remove_staging, job_id)
        if finished:
            log.info("staging.cleaned", jobs=len(finished))
        return len(finished)

    # -- published files nothing references ----------------------------------------
    # Expiry commits ``expired`` first and removes the files after; a crash in between
    # left them behind for good. This pass lists the published area (names only) and
    # removes the directories of jobs that can never be served again: finished jobs
    # whose delivery is not ``available`` (expired, blocked) and ids with no job row.
    # A job that is not finished is left alone -- its publication may be between the
    # rename and the commit. The listing costs one directory walk and one indexed query
    # per ``batch_size`` entries, so it runs at most every ``ORPHAN_SCAN_SECONDS``.
    ORPHAN_SCAN_SECONDS = 300.0
    _orphan_scan_due = 0.0

    async def _remove_unreferenced_published(self) -> int:
        now = time.monotonic()
        if now < self._orphan_scan_due:
            return 0
        self._orphan_scan_due = now + self.ORPHAN_SCAN_SECONDS
        entries = await asyncio.to_thread(self.store.published_entries)
        terminal = {s.value for s in TERMINAL_STATES}
        removed = 0
        for start in range(0, len(entries), self.batch_size):
            batch = entries[start : start + self.batch_size]
            async with self.engine.connect() as conn:
                known = await reads.job_states(conn, [e.job_id for e in batch])
            for entry in batch:
                state, delivery = known.get(entry.job_id, (None, None))
                if state is None or (
                    state in terminal and delivery != DeliveryState.AVAILABLE.value
                ):
                    await asyncio.to_thread(self.store.remove_published_entry, entry)
                    log.info("result.unreferenced_removed", job_id=str(entry.job_id))
                    removed += 1
        return removed
