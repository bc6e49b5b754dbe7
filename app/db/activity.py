"""The charts' rollup: per minute and kind, jobs created, finished by outcome, and the
queue sampled (``job_activity``).

* :func:`roll_up` (the workers' activity service, every ``ATLAS_ACTIVITY_INTERVAL_SECONDS``
  in one process at a time) recomputes the counts of the minutes since
  ``now() - LATE_SECONDS`` from ``job_history`` -- found through its BRIN index on
  ``at``, joined to ``jobs`` for the kind -- and samples the claimable queue once a
  minute. Its cost follows the last minute's throughput and, once a minute, the queued
  backlog; never the number of finished jobs. A history row committed more than
  ``LATE_SECONDS`` after its ``at`` (a transaction open that long) is not counted.
* :func:`chart` reads one primary-key range of the rollup: the last hour (per minute)
  or day (per ``bucket_minutes``), per kind.
Database time throughout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.clock import NOW_SQL, Clock
from atlas_jobs._app.lifecycle import JobState

LATE_SECONDS: Final = 30
"""How far back each pass recounts: a minute is final once this long has passed."""
KEEP_HOURS: Final = 48

_OUTCOMES: Final = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELED)
_FINISHED = ", ".join(f"'{s.value}'" for s in _OUTCOMES)

LOCK = text("SELECT pg_try_advisory_xact_lock(hashtextextended('atlas.activity', 0))")

# roll_up_moves: the counts of the last minutes, recomputed (idempotent: a pass that
# overlaps another's minutes writes the same numbers). Creations are the history rows
# without a source state (create, replay); endings the rows entering a terminal state
# from another (not a result's expiry, nor a late cancel's record).
ROLL_UP_MOVES = text(f"""
INSERT INTO job_activity AS a (minute, kind, created, succeeded, failed, canceled)
SELECT date_trunc('minute', h.at), j.kind,
       count(*) FILTER (WHERE h.from_state IS NULL),
       count(*) FILTER (WHERE h.to_state = '{JobState.SUCCEEDED.value}'),
       count(*) FILTER (WHERE h.to_state = '{JobState.FAILED.value}'),
       count(*) FILTER (WHERE h.to_state = '{JobState.CANCELED.value}')
  FROM job_history AS h
  JOIN jobs AS j ON j.id = h.job_id
 WHERE h.at >= date_trunc('minute', {NOW_SQL} - make_interval(secs => {LATE_SECONDS}))
   AND (h.from_state IS NULL
        OR (h.to_state IN ({_FINISHED}) AND h.from_state <> h.to_state))
 GROUP BY 1, 2
ON CONFLICT (minute, kind) DO UPDATE
   SET created = EXCLUDED.created, succeeded = EXCLUDED.succeeded,
       failed = EXCLUDED.failed, canceled = EXCLUDED.canceled
""")

# roll_up_queue: the claimable queue per kind now, once a minute: it reads every queued
# row (the partial index ix_jobs_claimable), so a pass skips it once the current minute
# has a sample: a large backlog's read is paid once a minute, not every pass
# (docs/performance.md, "Figures behind the code").
ROLL_UP_QUEUE = text(f"""
INSERT INTO job_activity AS a (minute, kind, queued, oldest_queued_seconds)
SELECT date_trunc('minute', {NOW_SQL}), kind, count(*),
       extract(epoch FROM {NOW_SQL} - min(available_at))
  FROM jobs
 WHERE state = '{JobState.QUEUED.value}' AND available_at <= {NOW_SQL}
   AND NOT EXISTS (SELECT FROM job_activity AS s
                    WHERE s.minute = date_trunc('minute', {NOW_SQL})
                      AND s.oldest_queued_seconds IS NOT NULL)
 GROUP BY kind
ON CONFLICT (minute, kind) DO UPDATE
   SET queued = greatest(a.queued, EXCLUDED.queued),
       oldest_queued_seconds = greatest(a.oldest_queued_seconds, EXCLUDED.oldest_queued_seconds)
""")

FORGET = text(f"""
DELETE FROM job_activity
 WHERE minute < {NOW_SQL} - make_interval(hours => {KEEP_HOURS})
""")

# chart: the rollup's rows of the last :minutes -- a range of its primary key -- grouped
# into buckets of :bucket minutes counted back from the current minute (bucket 0 ends
# with it; integer buckets, double precision arithmetic: no numeric per row). The row
# with a NULL kind carries the current minute, so an empty window still answers it.
_MINUTE = f"date_trunc('minute', {NOW_SQL})"
CHART = text(f"""
SELECT floor(date_part('epoch', {_MINUTE} - a.minute) / (60 * CAST(:bucket AS int)))::int
           AS back,
       a.kind,
       NULL::timestamptz AS now_minute,
       sum(a.created)::int AS created,
       sum(a.succeeded)::int AS succeeded,
       sum(a.failed)::int AS failed,
       sum(a.canceled)::int AS canceled,
       max(a.queued)::int AS queued,
       max(a.oldest_queued_seconds) AS oldest_queued_seconds
  FROM job_activity AS a
 WHERE a.minute > {_MINUTE} - make_interval(mins => CAST(:minutes AS int))
 GROUP BY 1, 2
 UNION ALL
SELECT 0, NULL, {_MINUTE}, 0, 0, 0, 0, 0, NULL
""")


@dataclass(frozen=True, slots=True)
class Point:
    """One bucket of one kind."""

    bucket: datetime
    kind: str
    created: int
    succeeded: int
    failed: int
    canceled: int
    queued: int
    oldest_queued_seconds: float | None


@dataclass(frozen=True, slots=True)
class Chart:
    """The buckets of a window (oldest first) and the points in them."""

    window_minutes: int
    bucket_minutes: int
    buckets: list[datetime]
    points: list[Point] = field(default_factory=list)

    def kinds(self) -> list[str]:
        return sorted({p.kind for p in self.points})


async def roll_up(conn: AsyncConnection, clock: Clock) -> bool:
    """One pass, in the caller's transaction; ``False`` when another process holds the
    rollup's lock (it is doing the same work now)."""
    if not (await conn.execute(LOCK)).scalar_one():
        return False
    now = clock.bind()
    await conn.execute(ROLL_UP_MOVES, now)
    await conn.execute(ROLL_UP_QUEUE, now)
    await conn.execute(FORGET, now)
    return True


async def chart(
    conn: AsyncConnection, clock: Clock, *, window_minutes: int, bucket_minutes: int
) -> Chart:
    """The window's points per bucket and kind (buckets without activity are absent)."""
    rows = (
        await conn.execute(
            CHART, {"minutes": window_minutes, "bucket": bucket_minutes, **clock.bind()}
        )
    ).all()
    [now_minute] = [row.now_minute for row in rows if row.kind is None]
    step = timedelta(minutes=bucket_minutes)
    points = [
        Point(
            bucket=now_minute - step * row.back,
            kind=row.kind,
            created=row.created,
            succeeded=row.succeeded,
            failed=row.failed,
            canceled=row.canceled,
            queued=row.queued,
            oldest_queued_seconds=row.oldest_queued_seconds,
        )
        for row in sorted(rows, key=lambda r: (-r.back, r.kind or ""))
        if row.kind is not None
    ]
    count = window_minutes // bucket_minutes
    buckets = [now_minute - timedelta(minutes=bucket_minutes * i) for i in reversed(range(count))]
    return Chart(window_minutes, bucket_minutes, buckets, points)


__all__ = ["Chart", "Point", "chart", "roll_up"]
