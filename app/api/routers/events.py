"""``GET /v1/jobs/{id}/events``: Server-Sent Events of transitions and progress.

Each history row is an event ``transition`` whose ``id`` is the history ``seq``, so a
client that reconnects with ``Last-Event-ID`` resumes exactly after what it saw. A
version change with no new history row (progress, heartbeat-free bookkeeping) is an
event ``progress`` carrying the status body, without an id. The stream ends once the
job is terminal and its delivery settled. Every stream follows the job's shared feed
(:mod:`atlas_jobs._app.services.feeds`: one read per change for all of its readers); a client
resuming
from before the history the feed holds reads that backlog itself, a page at a time.

Which events to send is the service's (:mod:`atlas_jobs._app.services.event_stream`); the
framing is :mod:`atlas_jobs._app.api.sse`'s; this module translates one into the other.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header
from sse_starlette import EventSourceResponse, ServerSentEvent

from atlas_jobs._app.api.deps import CurrentPrincipal, StateDep, bind_job
from atlas_jobs._app.api.responses import problems
from atlas_jobs._app.api.sse import KEEPALIVE_SECONDS, RETRY_MILLISECONDS, SEP, WatchedStream
from atlas_jobs._app.services.access import visible_owner
from atlas_jobs._app.services.event_stream import (
    Progress,
    Transition,
    job_events,
    open_job_stream,
    resume_after,
)
from atlas_jobs._app.services.feeds import FeedHub, Watcher
from atlas_jobs._app.services.views import history_item

router = APIRouter(prefix="/v1/jobs", tags=["events"])


async def _frames(
    feeds: FeedHub, watcher: Watcher, owner: str | None, after_seq: int
) -> AsyncIterator[ServerSentEvent]:
    """The job's events (:func:`job_events`) as SSE frames."""
    try:
        yield ServerSentEvent(retry=RETRY_MILLISECONDS, sep=SEP)
        async for event in job_events(
            feeds, watcher, owner, after_seq, idle_seconds=KEEPALIVE_SECONDS
        ):
            if isinstance(event, Transition):
                item = history_item(event.row).model_dump_json(by_alias=True)
                yield ServerSentEvent(item, event="transition", id=str(event.row.seq), sep=SEP)
            elif isinstance(event, Progress):
                yield ServerSentEvent(event.status.model_dump_json(), event="progress", sep=SEP)
    finally:
        watcher.close()


@router.get(
    "/{job_id}/events",
    name="stream",
    summary="Stream a job's transitions and progress (SSE)",
    response_class=EventSourceResponse,
    responses={
        200: {
            "description": "text/event-stream; events `transition` (id = history seq) and "
            "`progress` (the status body). Ends when the job is terminal.",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        **problems(404, 422, 429, 503),
    },
)
async def stream(
    job_id: uuid.UUID,
    state: StateDep,
    principal: CurrentPrincipal,
    last_event_id: Annotated[
        str | None,
        Header(alias="Last-Event-ID", max_length=32, description="Resume after this seq."),
    ] = None,
) -> EventSourceResponse:
    bind_job(job_id)
    owner = visible_owner(principal)
    watcher = await open_job_stream(state.feeds, job_id, key_id=principal.key_id, owner=owner)
    try:
        events = _frames(state.feeds, watcher, owner, resume_after(last_event_id))
        return WatchedStream(events, watcher=watcher)
    except BaseException:
        watcher.close()
        raise


__all__ = ["router"]
