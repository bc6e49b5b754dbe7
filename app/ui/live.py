"""``GET /ui/jobs/{id}/live``: the job page's Server-Sent Events.

The page's browser cannot send an ``Authorization`` header on an EventSource, so this
stream is authenticated by the session cookie. It follows the job's shared feed
(:class:`~atlas_jobs._app.services.feeds.FeedHub`): one database read per change of the job, shared
with
every API long-poll and event stream watching it, and the same per-key and per-process
watcher caps (429 / 503). Each event ``panel`` carries the job's panel rendered from the
feed's snapshot -- no query per viewer -- and htmx swaps it in (``sse-swap``). When the
job is terminal and its delivery settled, an event ``done`` closes the stream
(``sse-close``), so a finished page does not reconnect.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import Response
from sse_starlette import EventSourceResponse, ServerSentEvent

from atlas_jobs._app.api.deps import StateDep
from atlas_jobs._app.api.sse import KEEPALIVE_SECONDS, RETRY_MILLISECONDS, SEP, WatchedStream
from atlas_jobs._app.api.state import ApiState
from atlas_jobs._app.services.access import visible_owner
from atlas_jobs._app.services.event_stream import job_snapshots, open_job_stream
from atlas_jobs._app.services.feeds import Watcher
from atlas_jobs._app.services.refusals import JobNotFound
from atlas_jobs._app.services.snapshots import Snapshot
from atlas_jobs._app.services.views import history_item
from atlas_jobs._app.ui.auth import CurrentViewer, UiNotFoundError, Viewer
from atlas_jobs._app.ui.rendering import HISTORY_SHOWN, render
from atlas_jobs._app.ui.routes import parse_job_id, router, view_of


def render_panel(state: ApiState, snapshot: Snapshot, viewer: Viewer) -> str:
    assert snapshot.job is not None
    assert snapshot.status is not None
    history = [history_item(row) for row in snapshot.history[-HISTORY_SHOWN:]]
    view = view_of(state, snapshot.job, snapshot.status, history, viewer)
    return render("panel.html", view=view, viewer=viewer, csrf=viewer.session.csrf_token)


async def panels(
    state: ApiState, watcher: Watcher, viewer: Viewer
) -> AsyncIterator[ServerSentEvent]:
    owner = visible_owner(viewer.principal)
    try:
        yield ServerSentEvent(retry=RETRY_MILLISECONDS, sep=SEP)
        async for seen in job_snapshots(
            state.feeds, watcher, owner, idle_seconds=KEEPALIVE_SECONDS
        ):
            panel = render_panel(state, seen.snapshot, viewer)
            yield ServerSentEvent(panel, event="panel", sep=SEP)
            if seen.settled:
                yield ServerSentEvent("settled", event="done", sep=SEP)
    finally:
        watcher.close()


@router.get("/jobs/{job_id}/live", name="ui-job-live", response_class=EventSourceResponse)
async def live(job_id: str, state: StateDep, viewer: CurrentViewer) -> Response:
    job_uuid = parse_job_id(job_id)
    try:
        watcher = await open_job_stream(
            state.feeds,
            job_uuid,
            key_id=viewer.principal.key_id,
            owner=visible_owner(viewer.principal),
        )
    except JobNotFound:
        raise UiNotFoundError() from None
    try:
        return WatchedStream(panels(state, watcher, viewer), watcher=watcher)
    except BaseException:
        watcher.close()
        raise
