"""The bulk-operation runner: every worker process looks for an operator's bulk operation
every ``ATLAS_BULK_INTERVAL_SECONDS`` and runs the one it claims to its end, a batch
(``ATLAS_BULK_BATCH_SIZE`` jobs) per transaction.

Claims take the oldest operation no live lease holds with ``FOR UPDATE SKIP LOCKED``, so
several workers share the operations without waiting on each other, and an operation
whose worker died (its lease, ``ATLAS_BULK_LEASE_SECONDS``, ran out) is taken over and
continued from its last committed batch (:mod:`atlas_jobs._app.transitions.bulk`).
"""

from __future__ import annotations

import uuid

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.lifecycle import TERMINAL_BULK_OPERATION_STATES
from atlas_jobs._app.logs import get_logger
from atlas_jobs._app.transitions import Transitions
from atlas_jobs._app.transitions.bulk import BulkBatches

log = get_logger("atlas.worker.bulk")


class BulkRunner:
    def __init__(
        self,
        engine: AsyncEngine,
        transitions: Transitions,
        *,
        worker_id: str,
        batch_size: int,
        lease_seconds: float,
    ) -> None:
        self.engine = engine
        self.batches = BulkBatches(
            transitions.requests,
            worker_id=worker_id,
            batch_size=batch_size,
            lease_seconds=lease_seconds,
        )

    async def run_once(self) -> int:
        """Claim one operation and run it to its end; how many batches ran (0: none to
        run)."""
        async with self.engine.begin() as conn:
            op = await self.batches.claim(conn)
        if op is None:
            return 0
        log.info("bulk.claimed", operation_id=str(op.id), action=op.action)
        return await self._run(op.id)

    async def _run(self, operation_id: uuid.UUID) -> int:
        batches = 0
        while True:
            try:
                async with self.engine.begin() as conn:
                    after = await self.batches.run_batch(conn, operation_id)
            except Exception as exc:
                log.warning(
                    "bulk.failed", operation_id=str(operation_id), error_class=type(exc).__name__
                )
                async with self.engine.begin() as conn:
                    await self.batches.fail(conn, operation_id, type(exc).__name__)
                return batches
            batches += 1
            if after is None:
                log.info("bulk.lease_lost", operation_id=str(operation_id))
                return batches
            if after.state in TERMINAL_BULK_OPERATION_STATES:
                log.info(
                    "bulk.ended",
                    operation_id=str(operation_id),
                    state=after.state,
                    matched=after.matched,
                    done=after.done,
                )
                return batches
