"""The operators' page, ``/ui/ops``: charts of the last hour or day, the paused kinds
(pause and resume from the page), and -- through the same search and bulk operations as
the API -- the jobs of every owner.

Operators only: every route here, reads included, checks the role (a hidden link is not
a permission). Writes go where the API's go -- the pause service
(:mod:`atlas_jobs._app.services.pauses`) and the bulk operations' accept and preview
(:mod:`atlas_jobs._app.services.bulk_operations`, as ``POST /v1/bulk-operations``) -- after
the page's same-origin and CSRF checks.
``/ui/ops/live`` is the page's event stream: an ``activity`` event each time the charts'
rollup may have moved (its interval), on which the charts re-read -- no query per viewer
in the stream itself.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import parse_qsl, urlencode

from fastapi import Query, Request, Response
from pydantic import ValidationError
from sse_starlette import EventSourceResponse, ServerSentEvent

from atlas_jobs._app.api.bulk_schemas import (
    COUNT_CAP,
    SAMPLE_SIZE,
    BulkOperationCreate,
    BulkOperationPreview,
)
from atlas_jobs._app.api.deps import StateDep
from atlas_jobs._app.api.errors import problem_of
from atlas_jobs._app.api.pause_schemas import KindPauseCreate, KindResumeCreate
from atlas_jobs._app.api.search_schemas import CURSOR_PATTERN, JobSearch
from atlas_jobs._app.api.sse import RETRY_MILLISECONDS, SEP
from atlas_jobs._app.api.state import ApiState
from atlas_jobs._app.lifecycle import (
    ALL_REASONS,
    ALL_STATES,
    BulkAction,
)
from atlas_jobs._app.services import activity, bulk_operations
from atlas_jobs._app.services.paging import JOB_CURSOR, CursorMismatchError
from atlas_jobs._app.services.reading import list_jobs
from atlas_jobs._app.services.refusals import BulkOperationNotFound, Refusal
from atlas_jobs._app.ui import charts
from atlas_jobs._app.ui.auth import (
    CSRF_FIELD,
    CSRF_HEADER,
    CurrentViewer,
    UiForbiddenError,
    UiNotFoundError,
    Viewer,
    check_csrf,
    check_same_origin,
)
from atlas_jobs._app.ui.rendering import label_of
from atlas_jobs._app.ui.routes import UiBadFilterError, is_htmx, page, read_form, router

WindowName = Annotated[str, Query(alias="window", max_length=10)]


def operator(viewer: Viewer) -> Viewer:
    if not viewer.is_operator:
        raise UiForbiddenError("The operators' page needs the operator role")
    return viewer


async def charts_view(state: ApiState, window: str) -> dict[str, Any]:
    if window not in charts.WINDOWS:
        raise UiBadFilterError(f"Unknown window {window!r}: hour or day")
    minutes, bucket = charts.WINDOWS[window]
    chart = await activity.chart(
        state.reads, state.clock, window_minutes=minutes, bucket_minutes=bucket
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
    service = state.pauses()
    found, latest = await service.listing(events=10)
    return {
        "pauses": found,
        "pause_events": latest,
        "known_kinds": service.known_kinds(),
        "pause_notice": notice,
    }


def _actor(viewer: Viewer) -> str:
    return bulk_operations.requested_by(viewer.principal)


@router.get("/ops", name="ui-ops")
async def ops_page(state: StateDep, viewer: CurrentViewer, window: WindowName = "hour") -> Response:
    operator(viewer)
    search, query = search_of([])
    return page(
        "ops.html",
        viewer,
        **(await charts_view(state, window)),
        **(await pauses_view(state)),
        **(await jobs_view(state, search, query, None)),
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
        made, _ = await state.pauses().pause(
            kind=form.get("kind", "").strip(),
            version=body.version,
            actor=_actor(viewer),
            note=body.note,
        )
        which = made.kind if made.version is None else f"{made.kind}@{made.version}"
        notice = f"Paused {which}."
    except Refusal as refused:
        notice = problem_of(refused).detail
    except UiBadFilterError as refused:
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
        ended = await state.pauses().resume(
            kind=form.get("kind", ""), version=body.version, actor=_actor(viewer), note=None
        )
        which = ended.kind if ended.version is None else f"{ended.kind}@{ended.version}"
        notice = f"Resumed {which}."
    except Refusal as refused:
        notice = problem_of(refused).detail
    except UiBadFilterError as refused:
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


# --- jobs of every owner, and bulk operations ---------------------------------------------

JOBS_SHOWN = 25
MAX_BULK_FIELDS = JOBS_SHOWN + 40
_FILTER_FIELDS = ("state", "kind", "owner", "tag", "reason", "error_code")
_RANGE_FIELDS = ("created_after", "created_before", "finished_after", "finished_before")


def search_of(pairs: Sequence[tuple[str, str]]) -> tuple[JobSearch, str]:
    """The page's filter fields as the API's search model, and as a query string; a
    field the search refuses is a 422 page naming it."""
    lists: dict[str, list[str]] = {name: [] for name in _FILTER_FIELDS}
    ranges: dict[str, str] = {}
    for name, value in pairs:
        value = value.strip()
        if not value:
            continue
        if name in lists:
            lists[name].append(value)
        elif name in _RANGE_FIELDS:
            ranges[name] = value
    try:
        search = JobSearch.model_validate({**lists, **ranges})
    except ValidationError as invalid:
        first = invalid.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise UiBadFilterError(f"{where}: {first['msg']}") from None
    kept = [(n, v) for n in _FILTER_FIELDS for v in lists[n]] + sorted(ranges.items())
    return search, urlencode(kept)


async def jobs_view(
    state: ApiState, search: JobSearch, query: str, cursor: str | None
) -> dict[str, Any]:
    if cursor is not None and not re.fullmatch(CURSOR_PATTERN, cursor):
        raise UiBadFilterError("Malformed page cursor")
    try:
        page_filter = JOB_CURSOR.apply(search.to_filter(scope=None, limit=JOBS_SHOWN), cursor)
    except CursorMismatchError:
        raise UiBadFilterError("Malformed page cursor") from None
    listing = await list_jobs(state.reads, page_filter, clock=state.clock)
    items = [
        (owner, status, label_of(status)[0])
        for owner, status in zip(listing.owners, listing.statuses, strict=True)
    ]
    return {
        "jobs": items,
        "search": search,
        "filter_query": query,
        "all_states": [s.value for s in ALL_STATES],
        "all_reasons": [r.value for r in ALL_REASONS],
        "actions": [a.value for a in BulkAction],
        "older": (
            f"{query}&cursor={listing.next_cursor}".lstrip("&") if listing.next_cursor else None
        ),
    }


@router.get("/ops/jobs", name="ui-ops-jobs")
async def ops_jobs(request: Request, state: StateDep, viewer: CurrentViewer) -> Response:
    """Jobs of every owner matching the filter (the API's search), with checkboxes."""
    operator(viewer)
    pairs = list(request.query_params.multi_items())
    search, query = search_of(pairs)
    cursor = request.query_params.get("cursor")
    return page("ops_jobs.html", viewer, **(await jobs_view(state, search, query, cursor)))


async def _bulk_form(
    request: Request, state: ApiState, viewer: Viewer
) -> tuple[BulkOperationCreate, str]:
    """The bulk form -- action, note, which jobs (the checked ones, or every match of the
    page's filter) -- checked like every page form, as the API's request model."""
    check_same_origin(request, state.settings.public_url)
    body = await request.body()
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/x-www-form-urlencoded":
        raise UiForbiddenError("The page's forms send application/x-www-form-urlencoded")
    try:
        pairs = parse_qsl(
            body.decode("utf-8", errors="replace"),
            keep_blank_values=True,
            max_num_fields=MAX_BULK_FIELDS,
        )
    except ValueError:
        raise UiForbiddenError("Too many form fields") from None
    form = dict(pairs)
    check_csrf(viewer, request.headers.get(CSRF_HEADER) or form.get(CSRF_FIELD))
    operator(viewer)
    search, query = search_of(parse_qsl(form.get("filter", ""), max_num_fields=MAX_BULK_FIELDS))
    selection = form.get("selection", "checked")
    ids = [value for name, value in pairs if name == "job_id"]
    if selection != "filter" and not ids:
        raise UiBadFilterError("Check at least one job, or choose every match")
    try:
        chosen = BulkOperationCreate.model_validate(
            {
                "action": form.get("action", ""),
                **({"note": note} if (note := (form.get("note") or "").strip()) else {}),
                **(
                    {"filter": search.model_dump(mode="json")}
                    if selection == "filter"
                    else {"job_ids": ids or None}
                ),
            }
        )
    except ValidationError as invalid:
        first = invalid.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "form"
        raise UiBadFilterError(f"{where}: {first['msg']}") from None
    return chosen, query


def _refused(request: Request, viewer: Viewer, refused: UiBadFilterError) -> Response:
    """A bulk form the page must correct: in the panel (htmx swaps only 2xx answers),
    else the 422 page."""
    if not is_htmx(request):
        raise refused
    return page("ops_bulk_refused.html", viewer, reason=refused.detail)


@dataclass(frozen=True, slots=True)
class BulkProgress:
    """What the page shows of a bulk operation (its row, as the API's resource names it)."""

    id: uuid.UUID
    action: str
    state: str
    requested_by: str
    matched: int
    done: int
    skipped_by_reason: dict[str, int]
    error: str | None

    @property
    def skipped(self) -> int:
        return sum(self.skipped_by_reason.values())

    ended: bool

    @staticmethod
    def of(row: Any) -> BulkProgress:
        return BulkProgress(
            id=row.id,
            action=row.action,
            state=row.state,
            requested_by=row.requested_by,
            matched=row.matched,
            done=row.done,
            skipped_by_reason={str(k): int(v) for k, v in (row.skipped or {}).items()},
            error=None if row.error is None else str(row.error.get("message", "")),
            ended=bulk_operations.ended(row),
        )


@router.post("/ops/bulk/preview", name="ui-ops-bulk-preview")
async def bulk_preview(request: Request, state: StateDep, viewer: CurrentViewer) -> Response:
    """The dry run, as ``POST /v1/bulk-operations`` with ``dry_run`` answers it: how many
    jobs the action selects now, and a sample, with the confirmation form (the same
    fields, no dry run)."""
    try:
        chosen, query = await _bulk_form(request, state, viewer)
    except UiBadFilterError as refused:
        return _refused(request, viewer, refused)
    found = await bulk_operations.preview(
        state.reads,
        page=None if chosen.filter is None else chosen.filter.to_filter(scope=None),
        job_ids=chosen.job_ids,
        cap=COUNT_CAP,
        sample=SAMPLE_SIZE,
    )
    preview = BulkOperationPreview(
        action=chosen.action,
        matched=found.matched,
        matched_capped=found.matched >= COUNT_CAP,
        sample=found.sample,
    )
    return page(
        "ops_bulk_preview.html",
        viewer,
        preview=preview,
        chosen=chosen,
        filter_query=query,
        sample=[(s, label_of(s)[0]) for s in preview.sample],
    )


@router.post("/ops/bulk", name="ui-ops-bulk")
async def bulk_create(request: Request, state: StateDep, viewer: CurrentViewer) -> Response:
    """The operation accepted, as ``POST /v1/bulk-operations`` accepts it (the workers
    run it); the answer follows its progress."""
    try:
        chosen, _ = await _bulk_form(request, state, viewer)
    except UiBadFilterError as refused:
        return _refused(request, viewer, refused)
    row = await bulk_operations.accept(
        state.engine,
        action=chosen.action.value,
        page=None if chosen.filter is None else chosen.filter.to_filter(scope=None),
        job_ids=chosen.job_ids,
        note=chosen.note,
        operator=viewer.principal,
        clock=state.clock,
    )
    return page("ops_bulk_progress.html", viewer, operation=BulkProgress.of(row))


@router.get("/ops/bulk/{operation_id}", name="ui-ops-bulk-progress")
async def bulk_progress(operation_id: str, state: StateDep, viewer: CurrentViewer) -> Response:
    """One operation's progress; the fragment re-asks every second until it has ended."""
    operator(viewer)
    try:
        wanted = uuid.UUID(operation_id)
    except ValueError:
        raise UiNotFoundError() from None
    try:
        row = await bulk_operations.read(state.reads, wanted)
    except BulkOperationNotFound:
        raise UiNotFoundError() from None
    return page("ops_bulk_progress.html", viewer, operation=BulkProgress.of(row))
