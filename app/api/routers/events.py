"""``GET /v1/jobs/{id}/events``: Server-Sent Events of transitions and progress.

Each history row is an event ``transition`` whose ``id`` is the history ``seq``, so a
client that reconnects with ``Last-Event-ID`` resumes exactly after what it saw. A
version change with no new history row (progress, heartbeat-free bookkeeping) is an
event ``progress`` carrying the status body, without an id. The stream ends once the
job is terminal and its delivery settled. Every stream follows the job's shared feed
(:mod:`atlas_jobs._app.api.feeds`: one read per change for all of its readers); a client resuming
from before the history the feed holds reads that backlog itself, a page at a time.

The framing, the keep-alive comment every ``KEEPALIVE_SECONDS`` (so proxies do not close
an idle stream) and noticing a client that left come from sse-starlette's
``EventSourceResponse``; this module only decides *which* events to send.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.types import Receive, Scope, Send

from atlas_jobs._app.api.deps import CurrentPrincipal, StateDep, bind_job, visible_owner
from atlas_jobs._app.api.errors import JobNotFoundError
from atlas_jobs._app.api.feeds import FeedHub, Watcher
from atlas_jobs._app.api.responses import problems
from atlas_jobs._app.api.views import history_item
from atlas_jobs._app.lifecycle import DeliveryState, JobState, is_terminal

router = APIRouter(prefix="/v1/jobs", tags=["events"])

KEEPALIVE_SECONDS = 15.0
UNSETTLED = frozenset({DeliveryState.PARTIAL_PRIVATE, DeliveryState.STAGED_PRIVATE})
RETRY_MILLISECONDS = 2000
SEP = "\n"
"""Line separator of every frame (sse-starlette defaults to CRLF; LF is as valid and is
what this stream always sent)."""


def _last_event_id(value: str | None) -> int:
    """The history seq to resume after; anything unusable restarts from the beginning."""
    try:
        seq = int(value) if value else 0
    except ValueError:
        return 0
    return seq if 0 <= seq < 2**63 else 0


async def _stream(
    feeds: FeedHub, watcher: Watcher, owner: str | None, after_seq: int
) -> AsyncIterator[ServerSentEvent]:
    """Follow the job's feed (no query per change); catch up first, page by page, when
    ``Last-Event-ID`` is older than the history the feed holds."""
    try:
        seen_version: int | None = None
        snapshot = watcher.snapshot
        yield ServerSentEvent(retry=RETRY_MILLISECONDS, sep=SEP)
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
                    yield _transition(row)
                sent = True
            for row in snapshot.history_after(after_seq):
                after_seq = row.seq
                yield _transition(row)
                sent = True
            if not sent and seen_version is not None and job.version != seen_version:
                assert snapshot.status is not None
                yield ServerSentEvent(snapshot.status.model_dump_json(), event="progress", sep=SEP)
            seen_version = job.version
            done = is_terminal(JobState(job.state)) and (
                DeliveryState(job.delivery_state) not in UNSETTLED
            )
            if done:
                return
            found = await watcher.next(KEEPALIVE_SECONDS)
            if found is None and feeds.draining:
                return  # the server is shutting down: reconnect (``retry:``) elsewhere
            if found is not None:  # None: nothing new (sse-starlette sends the pings)
                snapshot = found
    finally:
        watcher.close()


def _transition(row: Any) -> ServerSentEvent:
    item = history_item(row).model_dump_json(by_alias=True)
    return ServerSentEvent(item, event="transition", id=str(row.seq), sep=SEP)


class WatchedStream(EventSourceResponse):
    """A stream that gives its watcher slot back however it ends -- also when the
    client left before the first byte, and the body was never started."""

    def __init__(self, content: AsyncIterator[ServerSentEvent], *, watcher: Watcher) -> None:
        super().__init__(
            content,
            headers={"Cache-Control": "no-store"},
            ping=KEEPALIVE_SECONDS,
            sep=SEP,
        )
        self.watcher = watcher

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.watcher.close()


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
    watcher = await state.feeds.open(job_id, principal.key_id)
    try:
        if watcher.snapshot is None or watcher.snapshot.visible_to(owner) is None:
            raise JobNotFoundError()
        events = _stream(state.feeds, watcher, owner, _last_event_id(last_event_id))
        return WatchedStream(events, watcher=watcher)
    except BaseException:
        watcher.close()
        raise


__all__ = ["router"]
