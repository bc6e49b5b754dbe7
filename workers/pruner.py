"""The pruner: deletes finished jobs once nobody can need them (River's ``JobCleaner``).

A finished job (``succeeded``, ``failed``, ``canceled``) is kept for the result
retention (``ATLAS_RESULT_TTL_SECONDS``) plus ``ATLAS_FINISHED_JOB_RETENTION_SECONDS``
after it finished, and never while its result is still downloadable; then it goes with
its history, attempts, stages, checkpoints and idempotency keys
(:data:`atlas_jobs._app.db.queries.PRUNE_FINISHED`, then
:data:`~atlas_jobs._app.db.queries.PRUNE_RECORDS` in the same transaction: the history and
the attempts have no foreign key to cascade along). Unfinished jobs are never touched. Each
batch deletes at most ``batch_size`` jobs (``ATLAS_PRUNE_BATCH_SIZE``) and commits on its own,
so a pass holds few locks for a short time and the table stays bounded under any churn. The
sweeper runs it after its own passes, in every worker process; the batches skip rows another
pruner (or a late cancel, or a replay) holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.queries import PRUNE_FINISHED, PRUNE_RECORDS
from atlas_jobs._app.logs import get_logger

log = get_logger("atlas.worker.pruner")


@dataclass(frozen=True, slots=True)
class PruneReport:
    pruned: int
    batches: int


class Pruner:
    def __init__(
        self, engine: AsyncEngine, clock: Clock, *, keep_seconds: float, batch_size: int = 1000
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.keep_seconds = keep_seconds
        self.batch_size = batch_size
        self.total = 0
        """Jobs this pruner deleted since it was made (benchmarks account with it)."""

    async def run_once(self) -> PruneReport:
        """Delete every prunable job now, one bounded batch per transaction."""
        pruned = batches = 0
        while True:
            deleted = await self._batch()
            batches += 1
            pruned += deleted
            if deleted < self.batch_size:
                break
        if pruned:
            log.info("jobs.pruned", jobs=pruned, batches=batches)
        return PruneReport(pruned=pruned, batches=batches)

    async def _batch(self) -> int:
        params = {"keep_seconds": self.keep_seconds, "limit": self.batch_size}
        async with self.engine.begin() as conn:
            result = await conn.execute(PRUNE_FINISHED, {**params, **self.clock.bind()})
            ids = list(result.scalars())
            if ids:
                await conn.execute(PRUNE_RECORDS, {"job_ids": ids})
            deleted = len(ids)
        self.total += deleted  # committed: counted even if a later batch is cancelled
        return deleted
