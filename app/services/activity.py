"""The operators' activity charts: jobs created and finished, and the queue's oldest
claimable age, per bucket and kind over a window, read from the rollup the workers keep
(:mod:`atlas_jobs._app.db.activity`).

The status page draws them; it comes here for the numbers (and their types) rather than
to the database layer.
"""

from __future__ import annotations

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import activity
from atlas_jobs._app.db.activity import Chart, Point
from atlas_jobs._app.db.engine import Connects

__all__ = ["Chart", "Point", "chart"]


async def chart(
    reads: Connects, clock: Clock, *, window_minutes: int, bucket_minutes: int
) -> Chart:
    """The window's points per bucket and kind (buckets without activity are absent)."""
    async with reads.connect() as conn:
        return await activity.chart(
            conn, clock, window_minutes=window_minutes, bucket_minutes=bucket_minutes
        )
