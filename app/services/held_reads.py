"""``Prefer: wait``: hold a status read until the job changes, served from its feed.

The read is answered from the job's shared snapshot (:mod:`atlas_jobs._app.services.feeds`), never
from
a query of its own: a thousand held reads of one job cost one read per change.
Owner scoping is checked on the snapshot's row, so another owner's job answers 404
exactly like an unknown one. The watcher slot is given back when the read ends -- or is
cancelled, when its client leaves (``atlas_jobs._app.api.longpoll``).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import datetime

from atlas_jobs._app.apikeys import Principal
from atlas_jobs._app.db.records import JobRow
from atlas_jobs._app.lifecycle import JobState, is_terminal
from atlas_jobs._app.services.access import visible_owner
from atlas_jobs._app.services.feeds import FeedHub
from atlas_jobs._app.services.refusals import JobNotFound
from atlas_jobs._app.services.schemas import JobPublic
from atlas_jobs._app.services.snapshots import Snapshot
from atlas_jobs._app.services.views import (
    etag_matches,
    waiting_for,
    waiting_tag,
    with_current_waiting,
)


def _visible(snapshot: Snapshot | None, owner: str | None) -> JobRow:
    job = snapshot.visible_to(owner) if snapshot is not None else None
    if job is None:
        raise JobNotFound()
    return job


@dataclass(frozen=True, slots=True)
class Held:
    job: JobRow
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
        assert snapshot is not None  # a visible job has a snapshot
        current = waiting_tag(waiting_for(job, snapshot.observed_now()))
        holding = etag_matches(if_none_match, job.version, current) or (
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
        # The snapshot's body was built at its read; what holds a queued job is as of now
        # (the same answer a plain read gives, and its ETag).
        now = snapshot.observed_now()
        status = with_current_waiting(snapshot.status, job, now)
        return Held(job, status, now)
