"""One heartbeat loop per worker process, for every attempt it holds.

Every ``lease / 3`` seconds one statement extends all leases (database time). What it
learns goes back to the job contexts: a cancel request (seen at the next safe point)
or a lost lease (the job task is stopped and writes nothing more).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping

from sqlalchemy.ext.asyncio import AsyncEngine

from app.logs import get_logger
from app.transitions import Transitions
from workers.context import JobContext

log = get_logger("atlas.worker.heartbeat")


class Heartbeat:
    def __init__(
        self,
        engine: AsyncEngine,
        transitions: Transitions,
        held: Callable[[], Mapping[uuid.UUID, JobContext]],
        on_lost: Callable[[JobContext], None],
    ) -> None:
        self.engine = engine
        self.transitions = transitions
        self.held = held
        self.on_lost = on_lost
        self.interval = transitions.lease_seconds / 3

    async def beat_once(self) -> None:
        contexts = dict(self.held())
        if not contexts:
            return
        pairs = [(job_id, ctx.attempt_id) for job_id, ctx in contexts.items()]
        async with self.engine.begin() as conn:
            states = await self.transitions.heartbeat_many(conn, pairs)
        for job_id, state in states.items():
            ctx = contexts[job_id]
            if state is None:
                if not ctx.publishing:  # a started publication settles on its own
                    self.on_lost(ctx)
            else:
                ctx.observe(state)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.beat_once()
            except Exception as exc:  # the database may be briefly unreachable
                log.warning("heartbeat.failed", error_class=type(exc).__name__)
