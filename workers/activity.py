"""The activity service: keeps the charts' per-minute rollup (``job_activity``) current.

Every worker process runs it every ``ATLAS_ACTIVITY_INTERVAL_SECONDS``; an advisory lock
lets one process at a time do a pass (the others skip theirs). A pass recounts the last
minute or two from the history and samples the queue: :func:`atlas_jobs._app.db.activity.roll_up`.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import activity


class ActivityRollup:
    def __init__(self, engine: AsyncEngine, clock: Clock) -> None:
        self.engine = engine
        self.clock = clock

    async def run_once(self) -> bool:
        """One pass; ``False`` when another process was doing it."""
        async with self.engine.begin() as conn:
            return await activity.roll_up(conn, self.clock)
