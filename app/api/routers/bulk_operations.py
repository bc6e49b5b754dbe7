"""``/v1/bulk-operations``: an operator's action (cancel, resume, fail, replay) over a
filter or an id list, as a resource of its own -- accepted with ``202`` and a
``Location``, run by the workers a batch at a time, read (with ``Prefer: wait``),
streamed (SSE) and canceled. Operators only; a dry run counts and samples first.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request, Response, status
from sse_starlette import EventSourceResponse, ServerSentEvent

from atlas_jobs._app.api.bulk_schemas import (
    COUNT_CAP,
    SAMPLE_SIZE,
    BulkOperationCreate,
    BulkOperationPage,
    BulkOperationPreview,
    BulkOperationPublic,
    search_document,
)
from atlas_jobs._app.api.deps import OperatorPrincipal, StateDep, api_state
from atlas_jobs._app.api.errors import BulkOperationEndedError, BulkOperationNotFoundError
from atlas_jobs._app.api.header_params import PREFER, documented, prefer_wait
from atlas_jobs._app.api.responses import headers, problems
from atlas_jobs._app.db import bulk, reads
from atlas_jobs._app.lifecycle import TERMINAL_BULK_OPERATION_STATES, ActorKind
from atlas_jobs._app.services.paging import BULK_OPERATION_CURSOR
from atlas_jobs._app.services.views import API_PREFIX, job_status
from atlas_jobs._app.transitions import Actor

router = APIRouter(prefix="/v1/bulk-operations", tags=["bulk-operations"])

POLL_SECONDS = 0.25
"""How often a held read or an event stream looks at the operation's row again."""
KEEPALIVE_SECONDS = 15.0
MAX_PAGE = 100


def operation_path(operation_id: uuid.UUID) -> str:
    return f"{API_PREFIX}/bulk-operations/{operation_id}"


def operation_public(row: Any) -> BulkOperationPublic:
    path = operation_path(row.id)
    skipped = {str(k): int(v) for k, v in (row.skipped or {}).items()}
    search = None if row.filter is None else search_document(row.filter)
    ended = row.state in TERMINAL_BULK_OPERATION_STATES
    jobs_link = None
    if search is not None:
        query = search.model_dump(mode="json", exclude_defaults=True)
        jobs_link = f"{API_PREFIX}/jobs" + (f"?{urlencode(query, doseq=True)}" if query else "")
    return BulkOperationPublic.model_validate(
        {
            "id": row.id,
            "action": row.action,
            "state": row.state,
            "filter": search,
            "job_count": None if row.job_ids is None else len(row.job_ids),
            "note": row.note,
            "requested_by": row.requested_by,
            "kinds": None if row.kinds is None else sorted(row.kinds),
            "counts": {
                "matched": row.matched,
                "done": row.done,
                "skipped": sum(skipped.values()),
                "skipped_by_reason": skipped,
            },
            "error": None
            if row.error is None
            else {
                "code": row.error.get("code", "error"),
                "message": row.error.get("message", ""),
                "retryable": False,
                "evidence": None,
            },
            "created_at": row.created_at,
            "started_at": row.started_at,
            "finished_at": row.finished_at,
            "cancel_requested_at": row.cancel_requested_at,
            "links": {
                "self": path,
                "events": f"{path}/events",
                "cancel": None if ended else f"{path}/cancel",
                "jobs": jobs_link,
            },
        }
    )


@router.post(
    "",
    name="create",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=BulkOperationPublic,
    summary="Start a bulk operation (or count it first: dry_run)",
    responses={
        202: {
            "description": "Accepted and durable; the workers run it. Poll the Location.",
            "headers": headers("Location"),
        },
        200: {"description": "A dry run: the count and a sample.", "model": BulkOperationPreview},
        **problems(400, 403, 413, 415, 422),
    },
)
async def create(
    body: BulkOperationCreate, state: StateDep, principal: OperatorPrincipal, response: Response
) -> Any:
    """The action applies to every selected job the key's scope covers, each through its
    named transition; jobs in a state the action does not act on, or of a kind outside
    the key's kinds, are skipped with the reason, never touched. A filter is fixed when
    the operation is accepted: jobs created later are not included. A filter that
    matches nothing is an operation that succeeds with 0 matched."""
    page = None if body.filter is None else body.filter.to_filter(scope=None)
    if body.dry_run:
        async with state.reads.connect() as conn:
            if page is not None:
                count, rows = await bulk.preview(conn, page, cap=COUNT_CAP, sample=SAMPLE_SIZE)
            else:
                assert body.job_ids is not None
                count, rows = await bulk.preview_ids(conn, body.job_ids, sample=SAMPLE_SIZE)
            stages = await reads.stages_for(conn, [row.id for row in rows])
        preview = BulkOperationPreview(
            action=body.action,
            matched=count,
            matched_capped=count >= COUNT_CAP,
            sample=[job_status(row, stages[row.id]) for row in rows],
        )
        return Response(preview.model_dump_json(), media_type="application/json")
    actor = Actor(ActorKind.OPERATOR, principal.owner)
    async with state.engine.begin() as conn:
        row = await bulk.accept(
            conn,
            action=body.action.value,
            page=page,
            job_ids=body.job_ids,
            note=body.note,
            requested_by=str(actor),
            key_id=principal.key_id,
            kinds=None if principal.kinds is None else sorted(principal.kinds),
            clock_params=state.clock.bind(),
        )
    response.headers["Location"] = operation_path(row.id)
    return operation_public(row)


@router.get(
    "",
    name="list",
    response_model=BulkOperationPage,
    summary="List bulk operations, newest first",
    responses=problems(403, 422),
)
async def list_operations(
    state: StateDep,
    _principal: OperatorPrincipal,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20,
    cursor: Annotated[str | None, Query(pattern=BULK_OPERATION_CURSOR.pattern)] = None,
) -> BulkOperationPage:
    async with state.reads.connect() as conn:
        rows = await bulk.listing(conn, before_seq=BULK_OPERATION_CURSOR.parse(cursor), limit=limit)
    shown = rows[:limit]
    return BulkOperationPage(
        items=[operation_public(row) for row in shown],
        next_cursor=BULK_OPERATION_CURSOR.make(shown[-1].seq)
        if len(rows) > limit and shown
        else None,
    )


@router.get(
    "/{operation_id}",
    name="get",
    response_model=BulkOperationPublic,
    summary="Read a bulk operation",
    responses={
        200: {"description": "Its state and counts.", "headers": headers("Preference-Applied")},
        **problems(403, 404, 422),
    },
    openapi_extra=documented(PREFER),
)
async def get(operation_id: uuid.UUID, request: Request, _principal: OperatorPrincipal) -> Any:
    """With `Prefer: wait=N` the answer is held until the operation has ended or N
    seconds (at most `ATLAS_MAX_WAIT_SECONDS`) have passed."""
    state = api_state(request)
    wait = prefer_wait(PREFER.read(request), state.settings.max_wait_seconds)
    deadline = time.monotonic() + (wait or 0)
    while True:
        async with state.reads.connect() as conn:
            row = await bulk.get(conn, operation_id)
        if row is None:
            raise BulkOperationNotFoundError()
        if row.state in TERMINAL_BULK_OPERATION_STATES or time.monotonic() >= deadline:
            break
        await asyncio.sleep(POLL_SECONDS)
    public = operation_public(row)
    if wait is None:
        return public
    return Response(
        public.model_dump_json(),
        media_type="application/json",
        headers={"Preference-Applied": f"wait={wait}", "Vary": "Prefer"},
    )


@router.post(
    "/{operation_id}/cancel",
    name="cancel",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=BulkOperationPublic,
    summary="Cancel a bulk operation",
    responses={
        202: {"description": "Canceled (queued), or its worker stops before the next batch."},
        **problems(403, 404, 409, 422),
    },
)
async def cancel(
    operation_id: uuid.UUID, state: StateDep, _principal: OperatorPrincipal
) -> BulkOperationPublic:
    """The batches already done stand; a running operation ends `canceled` before its
    next batch. An operation that has ended is 409 with its state."""
    async with state.engine.begin() as conn:
        row = await bulk.cancel(conn, operation_id, state.clock.bind())
        if row is None:
            current = await bulk.get(conn, operation_id)
    if row is None:
        if current is None:
            raise BulkOperationNotFoundError()
        raise BulkOperationEndedError(
            f"The bulk operation has ended: {current.state}", state=current.state
        )
    return operation_public(row)


@router.get(
    "/{operation_id}/events",
    name="stream",
    summary="Stream a bulk operation's progress (SSE)",
    response_class=EventSourceResponse,
    responses={
        200: {
            "description": "text/event-stream; an event `progress` (id = the operation's "
            "version, data = the operation) on every change. Ends when it has ended.",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        **problems(403, 404, 422),
    },
)
async def stream(
    operation_id: uuid.UUID, state: StateDep, _principal: OperatorPrincipal
) -> EventSourceResponse:
    async with state.reads.connect() as conn:
        first = await bulk.get(conn, operation_id)
    if first is None:
        raise BulkOperationNotFoundError()
    return EventSourceResponse(
        _events(state.reads, first),
        headers={"Cache-Control": "no-store"},
        ping=KEEPALIVE_SECONDS,
        sep="\n",
    )


async def _events(engine: Any, first: Any) -> AsyncIterator[ServerSentEvent]:
    row, sent = first, None
    while True:
        if row.version != sent:
            sent = row.version
            yield ServerSentEvent(
                operation_public(row).model_dump_json(), event="progress", id=str(sent), sep="\n"
            )
        if row.state in TERMINAL_BULK_OPERATION_STATES:
            return
        await asyncio.sleep(POLL_SECONDS)
        async with engine.connect() as conn:
            found = await bulk.get(conn, row.id)
        if found is None:
            return
        row = found
