"""Group commit for file-less publications (the no-op kind and its like).

Jobs whose result has no files finish in microseconds, so one transaction per job
would make the commit the bottleneck. Finished attempts queue here; one loop publishes
whatever has accumulated since its last flush in ONE statement
(:meth:`atlas_jobs._app.transitions.Transitions.publish_many`, history rows included), then wakes
each waiting job with its own outcome. No timer: an idle completer flushes a lone job
at once, a busy one batches naturally while the previous commit is in flight.
"""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.transitions import Actor, Applied, Transitions
from atlas_jobs._workers.context import JobContext

_Pending = tuple[JobContext, asyncio.Future[bool]]
"""A finished attempt waiting for the next flush, and the future its job awaits."""


class Completer:
    def __init__(
        self,
        engine: AsyncEngine,
        transitions: Transitions,
        *,
        actor: Actor,
        ttl_seconds: float,
        max_batch: int = 500,
    ) -> None:
        self.engine = engine
        self.transitions = transitions
        self.actor = actor
        self.ttl_seconds = ttl_seconds
        self.max_batch = max_batch
        self._pending: list[_Pending] = []
        self._ready = asyncio.Event()

    def publish(self, ctx: JobContext) -> asyncio.Future[bool]:
        """Queue this attempt's (empty) result for the next flush; the future answers
        True when it committed. A plain future, not a task: awaiting (or shielding) it
        costs no task per job. Cancelling it (the job's task was cancelled) only drops
        the wait: a queued publication is still committed with its batch."""
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((ctx, done))
        self._ready.set()
        return done

    async def flush_once(self) -> int:
        batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
        if not self._pending:
            self._ready.clear()
        if not batch:
            return 0
        try:
            # One statement (history and attempts included): atomic without BEGIN/COMMIT
            # when the pool hands an autocommit engine (atlas_jobs._app.db.engine.single_statements).
            async with self.engine.begin() as conn:
                results = await self.transitions.publish_many(
                    conn,
                    [(ctx.job_id, ctx.attempt_id) for ctx, _ in batch],
                    result_ref={"files": []},
                    ttl_seconds=self.ttl_seconds,
                    actor=self.actor,
                    explain_refusals=False,
                )
        except Exception as exc:
            for _, done in batch:
                if not done.done():
                    done.set_exception(exc)
            return 0
        for (_, done), result in zip(batch, results, strict=True):
            if not done.done():
                done.set_result(isinstance(result, Applied))
        return sum(isinstance(result, Applied) for result in results)

    async def run(self) -> None:
        while True:
            await self._ready.wait()
            # One loop turn lets every job that finished alongside join this batch.
            await asyncio.sleep(0)
            await self.flush_once()
