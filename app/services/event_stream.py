"""Which events a job's stream sends, from its shared feed (no query per change).

Each history row is a :class:`Transition` (its ``seq`` the event id, so a client that
resumes with ``Last-Event-ID`` continues exactly after what it saw); a version change with
no new history row (progress, bookkeeping) is a :class:`Progress` carrying the status
body. The stream ends once the job is settled (:func:`~atlas_jobs._app.services.views.settled`).
A stream resuming from before the history the feed holds reads that backlog itself, a
page at a time.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from atlas_jobs._app.lifecycle import DeliveryState, JobState
from atlas_jobs._app.services.feeds import FeedHub, Watcher
from atlas_jobs._app.services.refusals import JobNotFound
from atlas_jobs._app.services.schemas import JobPublic
from atlas_jobs._app.services.snapshots import Snapshot
from atlas_jobs._app.services.views import settled

MAX_EVENT_ID = 2**63  # history seq is a bigint


@dataclass(frozen=True, slots=True)
class Transition:
    row: Any
    """The history row."""


@dataclass(frozen=True, slots=True)
class Progress:
    status: JobPublic


@dataclass(frozen=True, slots=True)
class Seen:
    """The job as a watcher sees it now; ``settled``: the last one it will see."""

    snapshot: Snapshot
    settled: bool


async def open_job_stream(
    feeds: FeedHub, job_id: uuid.UUID, *, key_id: uuid.UUID, owner: str | None
) -> Watcher:
    """A watcher of the job's shared feed for API key ``key_id`` (its caps: 429 / 503),
    admitted only when ``owner`` may see the job: :class:`JobNotFound` otherwise (the
    watcher's slot is freed). The caller closes the watcher when its stream ends."""
    watcher = await feeds.open(job_id, key_id)
    try:
        if watcher.snapshot is None or watcher.snapshot.visible_to(owner) is None:
            raise JobNotFound()
    except BaseException:
        watcher.close()
        raise
    return watcher


async def job_snapshots(
    feeds: FeedHub, watcher: Watcher, owner: str | None, *, idle_seconds: float
) -> AsyncIterator[Seen]:
    """The job's snapshots as the feed has them: the current one, then one each time it
    changes and again every ``idle_seconds`` without news. Ends after a settled one,
    when the job is not visible to ``owner``, or when the feeds drain."""
    snapshot = watcher.snapshot
    while snapshot is not None:
        job = snapshot.visible_to(owner)
        if job is None:
            return
        done = settled(JobState(job.state), DeliveryState(job.delivery_state))
        yield Seen(snapshot, settled=done)
        if done:
            return
        found = await watcher.next(idle_seconds)
        if found is None and feeds.draining:
            return
        if found is not None:
            snapshot = found


def resume_after(last_event_id: str | None) -> int:
    """The history seq to resume after; anything unusable restarts from the beginning."""
    try:
        seq = int(last_event_id) if last_event_id else 0
    except ValueError:
        return 0
    return seq if 0 <= seq < MAX_EVENT_ID else 0


async def job_events(
    feeds: FeedHub,
    watcher: Watcher,
    owner: str | None,
    after_seq: int,
    *,
    idle_seconds: float,
) -> AsyncIterator[Transition | Progress]:
    """Follow the job's feed; catch up first, page by page, when ``after_seq`` is older
    than the history the feed holds; look again every ``idle_seconds`` without news.
    Ends when the job is settled, not visible to ``owner``, or the feeds drain."""
    seen_version: int | None = None
    snapshot = watcher.snapshot
    while snapshot is not None:
        job = snapshot.visible_to(owner)
        if job is None:
            return
        sent = False
        while after_seq < snapshot.history_floor:
            backlog = await feeds.history_page(watcher.feed.job_id, after_seq)
            if not backlog:
                break
            for row in backlog:
                after_seq = row.seq
                yield Transition(row)
            sent = True
        for row in snapshot.history_after(after_seq):
            after_seq = row.seq
            yield Transition(row)
            sent = True
        if not sent and seen_version is not None and job.version != seen_version:
            assert snapshot.status is not None
            yield Progress(snapshot.status)
        seen_version = job.version
        if settled(JobState(job.state), DeliveryState(job.delivery_state)):
            return
        found = await watcher.next(idle_seconds)
        if found is None and feeds.draining:
            return  # the server is shutting down: reconnect (``retry:``) elsewhere
        if found is not None:  # None: nothing new (the response sends the pings)
            snapshot = found
