"""The reaper: takes back jobs whose lease expired (their worker died or stalled).

Runs in every worker process every ``ATLAS_REAPER_INTERVAL_SECONDS``. Each pass locks
a bounded batch of expired leases with ``FOR UPDATE SKIP LOCKED`` (several reapers share
the work without waiting on each other) and rescues each job through
:meth:`app.transitions.Transitions.rescue`: ``running`` -> ``queued`` with the attempt
counted and a backoff, ``unresolved`` once the attempt budget is spent (so a job that
kills its worker every time cannot loop forever), ``cancel_requested`` -> ``canceled``.
The stale worker's later writes are refused by the attempt-id fence.
"""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.queries import EXPIRED_LEASES
from app.db.schema import jobs
from app.logs import get_logger
from app.transitions import Applied, Transitions
from workers.retry import kind_backoff

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
        moved = 0
        async with self.engine.begin() as conn:
            ids: list[uuid.UUID] = list(
                (
                    await conn.execute(
                        EXPIRED_LEASES,
                        {
                            "limit": self.batch_size,
                            "offset_seconds": t.clock.offset.total_seconds(),
                        },
                    )
                ).scalars()
            )
            if not ids:
                return 0, 0
            facts = {
                r.id: r
                for r in await conn.execute(
                    select(jobs.c.id, jobs.c.kind, jobs.c.attempt).where(jobs.c.id.in_(ids))
                )
            }
            for job_id in ids:
                fact = facts[job_id]
                outcome = await t.rescue(
                    conn, job_id, backoff_seconds=kind_backoff(fact.kind, fact.attempt)
                )
                if isinstance(outcome, Applied):
                    moved += 1
                    log.info(
                        "job.rescued",
                        job_id=str(job_id),
                        to_state=outcome.to_state.value,
                        transition=outcome.transition,
                    )
        return moved, len(ids)
