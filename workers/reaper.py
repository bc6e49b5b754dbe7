"""The reaper: takes back jobs whose lease expired (their worker died or stalled).

Runs in every worker process every ``ATLAS_REAPER_INTERVAL_SECONDS``. Each pass locks
a bounded batch of expired leases with ``FOR UPDATE SKIP LOCKED`` (several reapers share
the work without waiting on each other), with the facts of each job's retry budget on
database time, and rescues them through
:meth:`atlas_jobs._app.transitions.Transitions.rescue_locked` -- one statement per transition for
the whole batch: ``running`` -> ``queued`` with the attempt counted and a backoff, ``unresolved``
once the budget is spent (the same rule as a worker's retry, so a job that kills its worker every
time cannot loop forever), ``cancel_requested`` -> ``canceled``. The stale worker's later writes are
refused by the attempt-id fence.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.queries import EXPIRED_LEASES
from atlas_jobs._app.db.records import LeaseFacts
from atlas_jobs._app.logs import get_logger
from atlas_jobs._app.transitions import Applied, Transitions
from atlas_jobs._workers.retry import kind_backoff

log = get_logger("atlas.worker.reaper")


class Reaper:
    def __init__(self, engine: AsyncEngine, transitions: Transitions, *, batch_size: int = 100):
        self.engine = engine
        self.transitions = transitions
        self.batch_size = batch_size

    async def run_once(self) -> int:
        """Rescue every job whose lease has expired now; returns how many moved."""
        rescued = 0
        while True:
            moved, seen = await self._batch()
            rescued += moved
            if seen < self.batch_size:
                return rescued

    async def _batch(self) -> tuple[int, int]:
        t = self.transitions
        async with self.engine.begin() as conn:
            rows = await conn.execute(EXPIRED_LEASES, {"limit": self.batch_size, **t.clock.bind()})
            expired = [LeaseFacts.from_row(row) for row in rows]
            results = await t.rescue_locked(conn, expired, kind_backoff)
        moved = 0
        for job, outcome in zip(expired, results, strict=True):
            if isinstance(outcome, Applied):
                moved += 1
                log.info(
                    "job.rescued",
                    job_id=str(job.id),
                    to_state=outcome.to_state.value,
                    transition=outcome.transition,
                )
        return moved, len(expired)
