"""``Prefer: wait``: hold a status read until the job changes, served from its feed.

The read is answered from the job's shared snapshot (:mod:`app.api.feeds`), never from
a query of its own: a thousand held reads of one job cost one read per change.
Owner scoping is checked on the snapshot's row, so another owner's job answers 404
exactly like an unknown one.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row

from app.api.deps import visible_owner
from app.api.errors import JobNotFoundError
from app.api.feeds import FeedHub
from app.api.schemas import JobPublic
from app.api.snapshots import Snapshot
from app.api.views import etag_matches
from app.apikeys import Principal
from app.lifecycle import JobState, is_terminal


def _visible(snapshot: Snapshot | None, owner: str | None) -> Row[Any]:
    job = snapshot.visible_to(owner) if snapshot is not None else None
    if job is None:
        raise JobNotFoundError()
    return job


@dataclass(frozen=True, slots=True)
class Held:
    job: Row[Any]
    status: JobPublic
    now: datetime | None  # the database time now, as the snapshot knows it


async def held_status(
    feeds: FeedHub,
    job_id: uuid.UUID,
    principal: Principal,
    *,
    wait: float,
    if_none_match: str | None,
) -> Held:
    """The snapshot to answer with: at once when the client's copy is stale (or the job
    finished), else the first one with another version, else the current one after
    ``wait`` seconds. Holds a watcher slot meanwhile (429 / 503 beyond the caps)."""
    owner = visible_owner(principal)
    async with feeds.watch(job_id, principal.key_id) as watcher:
        snapshot = watcher.snapshot
        job = _visible(snapshot, owner)
        # Hold while the client's copy is current (If-None-Match), or -- without a
        # validator -- until the next change of a job that can still change.
        baseline = job.version
        holding = etag_matches(if_none_match, job.version) or (
            not if_none_match and not is_terminal(JobState(job.state))
        )
        deadline = time.monotonic() + wait
        while holding and job.version == baseline:
            remaining = deadline - time.monotonic()
            found = await watcher.next(remaining) if remaining > 0 else None
            if found is None:
                break
            snapshot = found
            job = _visible(snapshot, owner)
        assert snapshot is not None
        assert snapshot.status is not None  # a visible job has its status body
        return Held(job, snapshot.status, snapshot.observed_now())
