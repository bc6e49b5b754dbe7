"""``Prefer: wait``: hold a status read until the job changes, served from its feed.

The read is answered from the job's shared snapshot (:mod:`atlas_jobs._app.api.feeds`), never from
a query of its own: a thousand held reads of one job cost one read per change.
Owner scoping is checked on the snapshot's row, so another owner's job answers 404
exactly like an unknown one. A client that disconnects while its read is held gives its
watcher slot back at once (:func:`unless_client_leaves`), not when the wait would end.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Row
from starlette.types import Receive

from atlas_jobs._app.api.deps import visible_owner
from atlas_jobs._app.api.errors import JobNotFoundError
from atlas_jobs._app.api.feeds import FeedHub
from atlas_jobs._app.api.schemas import JobPublic
from atlas_jobs._app.api.snapshots import Snapshot
from atlas_jobs._app.api.views import etag_matches, waiting_for, waiting_tag, with_current_waiting
from atlas_jobs._app.apikeys import Principal
from atlas_jobs._app.lifecycle import JobState, is_terminal


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


T = TypeVar("T")


async def _disconnected(receive: Receive) -> None:
    """Return once the client has gone (a request without a body: nothing else comes)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_client_leaves(receive: Receive, hold: Coroutine[Any, Any, T]) -> T | None:
    """``hold``'s result, or ``None`` as soon as the client disconnects -- then ``hold``
    is cancelled, and its ``finally`` gives the watcher slot back at once."""
    held = asyncio.ensure_future(hold)
    gone = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait({held, gone}, return_when=asyncio.FIRST_COMPLETED)
        if held.done():
            return held.result()
        held.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await held
        return None
    finally:
        for task in (held, gone):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await gone
