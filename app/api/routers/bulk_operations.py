"""``/v1/bulk-operations``: an operator's action (cancel, resume, fail, replay) over a
filter or an id list, as a resource of its own -- accepted with ``202`` and a
``Location``, run by the workers a batch at a time, read (with ``Prefer: wait``),
streamed (SSE) and canceled. Operators only; a dry run counts and samples first.
"""

from __future__ import annotations

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
from atlas_jobs._app.api.header_params import PREFER, documented, prefer_wait
from atlas_jobs._app.api.responses import headers, problems
from atlas_jobs._app.services import bulk_operations
from atlas_jobs._app.services.paging import BULK_OPERATION_CURSOR
from atlas_jobs._app.services.views import API_PREFIX

router = APIRouter(prefix="/v1/bulk-operations", tags=["bulk-operations"])

KEEPALIVE_SECONDS = 15.0
MAX_PAGE = 100


def operation_path(operation_id: uuid.UUID) -> str:
    return f"{API_PREFIX}/bulk-operations/{operation_id}"


def operation_public(row: Any) -> BulkOperationPublic:
    path = operation_path(row.id)
    skipped = {str(k): int(v) for k, v in (row.skipped or {}).items()}
    search = None if row.filter is None else search_document(row.filter)
    ended = bulk_operations.ended(row)
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
        found = await bulk_operations.preview(
            state.reads, page=page, job_ids=body.job_ids, cap=COUNT_CAP, sample=SAMPLE_SIZE
        )
        preview = BulkOperationPreview(
            action=body.action,
            matched=found.matched,
            matched_capped=found.matched >= COUNT_CAP,
            sample=found.sample,
        )
        return Response(preview.model_dump_json(), media_type="application/json")
    row = await bulk_operations.accept(
        state.engine,
        action=body.action.value,
        page=page,
        job_ids=body.job_ids,
        note=body.note,
        operator=principal,
        clock=state.clock,
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
    found = await bulk_operations.listing(
        state.reads, before_seq=BULK_OPERATION_CURSOR.parse(cursor), limit=limit
    )
    return BulkOperationPage(
        items=[operation_public(row) for row in found.shown],
        next_cursor=BULK_OPERATION_CURSOR.after(found, lambda row: row.seq),
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
    row = await bulk_operations.read_held(state.reads, operation_id, wait=wait)
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
    row = await bulk_operations.cancel(state.engine, operation_id, clock=state.clock)
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
    first = await bulk_operations.read(state.reads, operation_id)
    return EventSourceResponse(
        _events(state.reads, first),
        headers={"Cache-Control": "no-store"},
        ping=KEEPALIVE_SECONDS,
        sep="\n",
    )


async def _events(engine: Any, first: Any) -> AsyncIterator[ServerSentEvent]:
    """Each change of the operation as an event ``progress`` (id = its version)."""
    async for row in bulk_operations.follow(engine, first):
        yield ServerSentEvent(
            operation_public(row).model_dump_json(), event="progress", id=str(row.version), sep="\n"
        )
