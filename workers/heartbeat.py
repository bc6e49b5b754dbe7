"""One heartbeat loop per worker process, for every attempt it holds.

Every ``lease / 3`` seconds one statement extends all leases (database time), on a
connection of its own so job work never delays it. What it
learns goes back to the job contexts: a cancel request (seen at the next safe point)
or a lost lease (the job task is stopped and writes nothing more). The pool's held
attempts include the jobs waiting in its local queue, so their leases are extended too.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.logs import get_logger
from atlas_jobs._app.transitions import Transitions
from atlas_jobs._workers.context import JobContext

log = get_logger("atlas.worker.heartbeat")


class Heartbeat:
    def __init__(
        self,
        engine: AsyncEngine,
        transitions: Transitions,
        held: Callable[[], Mapping[uuid.UUID, JobContext]],
        on_lost: Callable[[JobContext], None],
        *,
        on_beat: Callable[[], None] | None = None,
    ) -> None:
        self.engine = engine
        self.transitions = transitions
        self.held = held
        self.on_lost = on_lost
        self.on_beat = on_beat
        """Called after each beat's answers reached the contexts (the pool starts a
        locally queued job whose cancel request the beat saw)."""
        self.interval = transitions.lease_seconds / 3
        self.lost_while_alive = 0
        """Leases this live process found lost: a beat came too late (a starved process,
        an unreachable database). Logged with how late; should stay at zero."""
        self._last_beat = time.monotonic()

    async def beat_once(self) -> None:
        contexts = dict(self.held())
        started = time.monotonic()
        if not contexts:
            self._last_beat = started
            return
        pairs = [(job_id, ctx.attempt_id) for job_id, ctx in contexts.items()]
        async with self.engine.begin() as conn:  # one statement: autocommit is fine
            states = await self.transitions.heartbeat_many(conn, pairs)
        for job_id, state in states.items():
            ctx = contexts[job_id]
            if state is None:
                if not ctx.publishing:  # a started publication settles on its own
                    self.lost_while_alive += 1
                    log.warning(
                        "lease.lost_while_alive",
                        job_id=str(job_id),
                        attempt_id=str(ctx.attempt_id),
                        seconds_since_last_beat=round(started - self._last_beat, 3),
                        lease_seconds=self.transitions.lease_seconds,
                    )
                    self.on_lost(ctx)
            else:
                ctx.observe(state)
        self._last_beat = started
        if self.on_beat is not None:
            self.on_beat()

    async def run(self) -> None:
        """Beat every ``lease / 3`` on a fixed cadence: a slow beat shortens the next
        pause instead of pushing every later beat back."""
        while True:
            await asyncio.sleep(max(0.0, self._last_beat + self.interval - time.monotonic()))
            try:
                await self.beat_once()
            except Exception as exc:  # the database may be briefly unreachable
                log.warning("heartbeat.failed", error_class=type(exc).__name__)
                await asyncio.sleep(min(self.interval, 1.0))
