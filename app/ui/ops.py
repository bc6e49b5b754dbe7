"""The operators' page, ``/ui/ops``: charts of the last hour or day, the paused kinds
(pause and resume from the page), and -- through the same search and bulk operations as
the API -- the jobs of every owner.

Operators only: every route here, reads included, checks the role (a hidden link is not
a permission). Writes go through the API's own route functions
(:mod:`atlas_jobs._app.api.routers.pauses`), after the page's same-origin and CSRF checks.
``/ui/ops/live`` is the page's event stream: an ``activity`` event each time the charts'
rollup may have moved (its interval), on which the charts re-read -- no query per viewer
in the stream itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Query, Request, Response
from pydantic import ValidationError
from sse_starlette import EventSourceResponse, ServerSentEvent

from atlas_jobs._app.api.deps import StateDep
from atlas_jobs._app.api.errors import ApiError
from atlas_jobs._app.api.pause_schemas import KindPauseCreate, KindResumeCreate
from atlas_jobs._app.api.routers import pauses as pause_routes
from atlas_jobs._app.api.routers.events import RETRY_MILLISECONDS, SEP
from atlas_jobs._app.api.state import ApiState
from atlas_jobs._app.db import activity, pauses
from atlas_jobs._app.kinds import KINDS
from atlas_jobs._app.ui import charts
from atlas_jobs._app.ui.auth import (
    CSRF_FIELD,
    CSRF_HEADER,
    CurrentViewer,
    UiForbiddenError,
    Viewer,
    check_csrf,
    check_same_origin,
)
from atlas_jobs._app.ui.routes import UiBadFilterError, page, read_form, router

WindowName = Annotated[str, Query(alias="window", max_length=10)]


def operator(viewer: Viewer) -> Viewer:
    if not viewer.is_operator:
        raise UiForbiddenError("The operators' page needs the operator role")
    return viewer


async def charts_view(state: ApiState, window: str) -> dict[str, Any]:
    if window not in charts.WINDOWS:
        raise UiBadFilterError(f"Unknown window {window!r}: hour or day")
    minutes, bucket = charts.WINDOWS[window]
    async with state.reads.connect() as conn:
        chart = await activity.chart(
            conn, state.clock, window_minutes=minutes, bucket_minutes=bucket
        )
    latest = chart.buckets[-1] if chart.buckets else None
    now = [p for p in chart.points if p.bucket == latest and p.queued]
    return {
        "window": window,
        "windows": list(charts.WINDOWS),
        "created": charts.created_chart(chart),
        "finished": charts.finished_chart(chart),
        "queue_age": charts.queue_age_chart(chart),
        "queue_now": sorted(now, key=lambda p: -(p.oldest_queued_seconds or 0)),
    }


async def pauses_view(state: ApiState, notice: str | None = None) -> dict[str, Any]:
    async with state.reads.connect() as conn:
        found = await pauses.paused(conn)
        latest = await pauses.events(conn, limit=10)
    served = {key.split("@", 1)[0] for key in state.live_workers.counts or {}}
    return {
        "pauses": found,
        "pause_events": latest,
        "known_kinds": sorted({*KINDS, *served}),
        "pause_notice": notice,
    }


@router.get("/ops", name="ui-ops")
async def ops_page(state: StateDep, viewer: CurrentViewer, window: WindowName = "hour") -> Response:
    operator(viewer)
    return page(
        "ops.html",
        viewer,
        **(await charts_view(state, window)),
        **(await pauses_view(state)),
    )


@router.get("/ops/charts", name="ui-ops-charts")
async def ops_charts(
    state: StateDep, viewer: CurrentViewer, window: WindowName = "hour"
) -> Response:
    operator(viewer)
    return page("ops_charts.html", viewer, **(await charts_view(state, window)))


@router.get("/ops/pauses", name="ui-ops-pauses")
async def ops_pauses(state: StateDep, viewer: CurrentViewer) -> Response:
    operator(viewer)
    return page("ops_pauses.html", viewer, **(await pauses_view(state)))


def _version(raw: str | None) -> int | None:
    text = (raw or "").strip()
    if not text:
        return None
    if not text.isdigit() or not 1 <= int(text) < 2**31:
        raise UiBadFilterError(f"Version {text!r} is not a version number")
    return int(text)


async def _checked_form(request: Request, state: ApiState, viewer: Viewer) -> dict[str, str]:
    check_same_origin(request, state.settings.public_url)
    form = await read_form(request)
    check_csrf(viewer, request.headers.get(CSRF_HEADER) or form.get(CSRF_FIELD))
    operator(viewer)
    return form


@router.post("/ops/pauses", name="ui-ops-pause")
async def pause(request: Request, state: StateDep, viewer: CurrentViewer) -> Response:
    form = await _checked_form(request, state, viewer)
    notice: str
    try:
        body = KindPauseCreate(
            version=_version(form.get("version")), note=(form.get("note") or "").strip() or None
        )
        made = await pause_routes.pause_kind(
            state, viewer.principal, Response(), kind=form.get("kind", "").strip(), body=body
        )
        which = made.kind if made.version is None else f"{made.kind}@{made.version}"
        notice = f"Paused {which}."
    except (ApiError, UiBadFilterError) as refused:
        notice = refused.detail
    except ValidationError as invalid:
        notice = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in invalid.errors())
    return page("ops_pauses.html", viewer, **(await pauses_view(state, notice)))


@router.post("/ops/pauses/resume", name="ui-ops-resume")
async def resume(request: Request, state: StateDep, viewer: CurrentViewer) -> Response:
    form = await _checked_form(request, state, viewer)
    notice: str
    try:
        body = KindResumeCreate(version=_version(form.get("version")))
        ended = await pause_routes.resume_kind(
            state, viewer.principal, kind=form.get("kind", ""), body=body
        )
        which = ended.kind if ended.version is None else f"{ended.kind}@{ended.version}"
        notice = f"Resumed {which}."
    except (ApiError, UiBadFilterError) as refused:
        notice = refused.detail
    return page("ops_pauses.html", viewer, **(await pauses_view(state, notice)))


async def _ticks(every: float) -> AsyncIterator[ServerSentEvent]:
    yield ServerSentEvent(retry=RETRY_MILLISECONDS, sep=SEP)
    while True:
        await asyncio.sleep(every)
        yield ServerSentEvent("{}", event="activity", sep=SEP)


@router.get("/ops/live", name="ui-ops-live", response_class=EventSourceResponse)
async def live(state: StateDep, viewer: CurrentViewer) -> Response:
    operator(viewer)
    return EventSourceResponse(_ticks(state.settings.activity_interval_seconds), sep=SEP)
