"""Admission control for new jobs: refuse early, with Retry-After, rather than accept
work the service cannot start soon (SPEC section 3: 429 or 503 + Retry-After).

* Per owner: at most ``admission_max_active_per_owner`` unfinished jobs (429); a batch
  is admitted only if all its new jobs fit. Counted with a LIMIT along
  ``ix_jobs_owner_active``, so the check costs the same for an owner with ten jobs or
  ten million finished ones (it grows with the owner's unfinished jobs, up to the cap),
  under a per-owner advisory lock held to the end of the creating transaction, so
  concurrent creations cannot overshoot. Lock and count are one round trip: the
  database function ``atlas_admission_count`` (migration ``e8f9a0b1c2d3``) takes the
  lock, then counts with a snapshot taken after the lock was granted.
* Globally, by queue age: while the oldest *claimable* job has waited longer than
  ``admission_max_queue_age_seconds``, workers are not keeping up (503). The age is the
  first entry of ``ix_jobs_claimable``.

An idempotent replay is never refused: it creates nothing.
"""

from __future__ import annotations

import math

from sqlalchemy.ext.asyncio import AsyncConnection

from app.api.errors import QueueBackedUpError, TooManyActiveJobsError
from app.clock import Clock
from app.db import queries, reads
from app.settings import Settings

RETRY_AFTER_SECONDS = 5


async def check_admission(
    conn: AsyncConnection, *, owner: str, settings: Settings, clock: Clock, adding: int = 1
) -> None:
    """Refuse ``adding`` new jobs (a batch counts whole: all fit or none is created)."""
    limit = settings.admission_max_active_per_owner
    if limit is not None:
        # Under the owner's admission lock until commit (taken by the same round trip,
        # before the count's snapshot): two concurrent creations cannot both count the
        # last free place.
        count = await queries.admission_count(conn, owner, up_to=limit)
        if count + adding > limit:
            asked = "" if adding == 1 else f", {adding} more asked"
            raise TooManyActiveJobsError(
                f"{count} unfinished jobs{asked} (limit {limit}); wait for some to finish",
                retry_after=RETRY_AFTER_SECONDS,
            )
    max_age = settings.admission_max_queue_age_seconds
    if max_age is not None:
        oldest = await reads.oldest_claimable_age(conn, clock.now())
        if oldest is not None and oldest > max_age:
            raise QueueBackedUpError(
                f"the oldest claimable job has waited {oldest:.0f} s (limit {max_age:.0f} s)",
                retry_after=max(RETRY_AFTER_SECONDS, math.ceil(max_age / 2)),
            )
