"""Admission control for new jobs: refuse early, with Retry-After, rather than accept
work the service cannot start soon (docs/protocol.md §3.6: answered 429 or 503 + Retry-After).

* Per owner: at most ``admission_max_active_per_owner`` unfinished jobs (429); a batch
  is admitted only if all its new jobs fit. The rule lives in ONE place, the creation
  statement itself (``CREATE_ADMITTED`` in :mod:`atlas_jobs._app.db.queries`, used by
  :meth:`atlas_jobs._app.transitions.Transitions.create_many` with ``admission_cap``): the database
  function ``atlas_admission_count`` (migration ``e8f9a0b1c2d3``) takes a per-owner
  advisory lock held to the end of the creating transaction, then reads the owner's
  count of unfinished jobs with a snapshot taken after the lock was granted. The count
  is the sum of the owner's rows of ``owner_backlog`` (migrations ``c4d5e6f7a8b9``,
  ``f2a3b4c5d6e7``; at most 16, each one writing connection's share, possibly negative:
  only the sum is the count), kept exact by statement-level triggers on ``jobs`` in the writing
  transaction itself: a primary-key range, the same for ten unfinished jobs or ten
  thousand (before, the function counted the jobs, a scan growing with the backlog);
  the jobs are written only when ``count + new <= cap``. Concurrent creations of one
  owner therefore cannot overshoot, and a creation without an Idempotency-Key is ONE
  statement in its own transaction (the lock ends with it). Refused, nothing is written
  and :func:`at_capacity` is the refusal.
* Globally, by queue age: while the oldest *claimable* job has waited longer than
  ``admission_max_queue_age_seconds``, workers are not keeping up (503). The age is the
  first entry of ``ix_jobs_claimable``.

An idempotent replay is never refused: it creates nothing.
"""

from __future__ import annotations

import math

from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import reads
from atlas_jobs._app.services.refusals import AtCapacity, QueueBackedUp
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.transitions import OwnerAtCapacity

RETRY_AFTER_SECONDS = 5


def at_capacity(refused: OwnerAtCapacity, *, adding: int, limit: int | None) -> AtCapacity:
    """The refusal of a creation the per-owner cap refused (only a cap refuses)."""
    assert limit is not None
    return AtCapacity(refused.unfinished, adding, limit, retry_after=RETRY_AFTER_SECONDS)


async def check_queue_age(conn: AsyncConnection, *, settings: Settings, clock: Clock) -> None:
    """Refuse while the oldest claimable job has waited past the limit (when one is set)."""
    max_age = settings.admission_max_queue_age_seconds
    if max_age is not None:
        oldest = await reads.oldest_claimable_age(conn, clock.now())
        if oldest is not None and oldest > max_age:
            raise QueueBackedUp(
                oldest,
                max_age,
                retry_after=max(RETRY_AFTER_SECONDS, math.ceil(max_age / 2)),
            )
